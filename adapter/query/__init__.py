"""PromQL built from requests, label selectors, Kubernetes quantities: pure functions."""
