"""What a GPU node has where none runs here: the kubelet's pod-resources server, a /proc tree, NVML replayed from an
H200 trace, and the collector as a process."""
