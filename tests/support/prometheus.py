"""The real Prometheus server the tests start lives with the demo, which starts it too."""

from demo.prometheus import Prometheus, free_port, run_prometheus

__all__ = ["Prometheus", "free_port", "run_prometheus"]
