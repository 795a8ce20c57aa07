"""PromQL text, label and field selectors, Go's regexps, Kubernetes quantities: pure functions."""
