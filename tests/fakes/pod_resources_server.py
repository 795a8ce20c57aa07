"""The kubelet stand-in lives with the demo, which serves it too."""

from demo.kubelet import FakePod, PodResourcesServer, gpu_pod, parse_spec

__all__ = ["FakePod", "PodResourcesServer", "gpu_pod", "parse_spec"]
