"""Kubernetes custom and external metrics APIs answered from Prometheus, with GPU rules built in."""
