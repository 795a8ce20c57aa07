"""Stand-ins and helpers that tests, benchmarks and the demo share: never shipped (not in the wheel or the image).

kube/     the Kubernetes API stand-in (objects, discovery, reviews), the aggregation layer, a cluster's PKI, kubectl
node/     what a GPU node has: the kubelet's pod-resources server, a /proc tree, NVML replayed from an H200 trace,
          the collector as a process
stores/   real Prometheus and VictoriaMetrics processes, the exporters they scrape, a recording proxy in front
adapter/  the adapter in process and as a process, and several replicas of it
deploy/   the manifests read as a cluster would read them, their RBAC, schemas and the Dockerfile
"""
