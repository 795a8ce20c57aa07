"""The Kubernetes API stand-in lives with the demo, which serves it too."""

from demo.kube_api import TOKEN, FakeKubeAPIServer

__all__ = ["TOKEN", "FakeKubeAPIServer"]
