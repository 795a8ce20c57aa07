"""Clients of the systems the adapter reads: Prometheus and the Kubernetes API."""
