"""The kubelet stand-in lives with the demo, which serves it too."""

from demo.kubelet import DraClaim, FakePod, PodResourcesServer, gpu_pod, parse_spec

__all__ = ["DraClaim", "FakePod", "PodResourcesServer", "gpu_pod", "parse_spec"]
