"""Metric stores as real processes (Prometheus, VictoriaMetrics), the exporters they scrape, and a recording proxy
in front of them."""
