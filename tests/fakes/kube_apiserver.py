"""The Kubernetes API stand-in lives with the demo, which serves it too."""

from demo.kube_api import TOKEN, FakeKubeAPIServer
from demo.kube_discovery import Served

__all__ = ["TOKEN", "FakeKubeAPIServer", "Served"]
