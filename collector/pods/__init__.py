"""Who uses which GPU: the kubelet's pod-resources map, processes' cgroups, the pods on this node, batch jobs."""
