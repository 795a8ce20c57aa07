"""The series a cluster's Prometheus holds for metrics.k8s.io, as kube-prometheus scrapes them (cAdvisor's
``container_*``, the kubelet's ``/metrics/resource`` ``node_*``, node-exporter's ``node_cpu_seconds_total`` and
``node_memory_*``, the ``node_namespace_pod:kube_pod_info:`` recording rule), served for scraping with exact values,
and the usage each pod and node must then show.

Counters grow at a fixed rate and carry explicit timestamps on a one-second grid, so ``irate`` over any two of their
samples is exactly the rate: the rates are binary fractions (0.25, 0.125, 1.5) that float arithmetic keeps exact.
Memory gauges are whole bytes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from harness.kube.api import FakeKubeAPIServer
from harness.stores.exporter import Exporter
from harness.stores.prometheus import Prometheus, run_prometheus

Mi = 1024 * 1024
Gi = 1024 * Mi


@dataclass(frozen=True)
class Container:
    namespace: str
    pod: str
    name: str  # "" is the pod's own cgroup, which cAdvisor also reports
    node: str
    cpu: float | None  # cores: the counter's rate
    memory: str | None  # bytes, as the exposition writes them (NaN included)


CONTAINERS = (
    Container("ml", "trainer-0", "main", "node-a", 0.25, str(100 * Mi)),
    Container("ml", "trainer-0", "sidecar", "node-a", 0.125, str(20 * Mi + 300 * 1024)),
    Container("ml", "trainer-0", "", "node-a", 1.0, str(200 * Mi)),  # the pod's cgroup: the rules leave it out
    Container("ml", "trainer-1", "main", "node-a", 1.5, str(Gi + 512 * 1024)),
    Container("ml", "mixed-0", "main", "node-b", 0.25, str(50 * Mi)),
    Container("ml", "mixed-0", "helper", "node-b", 0.125, None),  # CPU only: its memory is 0
    Container("ml", "idle-0", "main", "node-b", 0.0625, None),  # no memory series at all: the pod is left out
    Container("ml", "broken-0", "main", "node-b", 0.5, "NaN"),  # left out, never answered as 0
    Container("ml", "gone-0", "main", "node-b", 2.0, str(Gi)),  # Kubernetes no longer has it
    Container("serving", "infer-0", "main", "node-b", 0.375, str(300 * Mi)),
)
# Pods the Kubernetes API has, with their labels; new-0 has no series yet.
PODS = {
    ("ml", "trainer-0"): {"app": "trainer"},
    ("ml", "trainer-1"): {"app": "trainer"},
    ("ml", "mixed-0"): {"app": "mixed"},
    ("ml", "idle-0"): {"app": "idle"},
    ("ml", "broken-0"): {"app": "trainer"},
    ("ml", "new-0"): {"app": "trainer"},
    ("serving", "infer-0"): {"app": "infer"},
}
ANSWERED_PODS = {("ml", "trainer-0"), ("ml", "trainer-1"), ("ml", "mixed-0"), ("serving", "infer-0")}

# Nodes: allocatable CPU (cores) and memory (bytes); node-c has no series.
NODES = {"node-a": (4, 16 * Gi), "node-b": (2, 8 * Gi), "node-c": (8, 32 * Gi)}
# The kubelet's /metrics/resource (prometheus-adapter's deploy config reads these)
KUBELET_NODE_CPU = {"node-a": 2.5, "node-b": 0.75}
KUBELET_NODE_MEMORY = {"node-a": 8 * Gi, "node-b": 3 * Gi + 5 * Mi}
# node-exporter (kube-prometheus's config reads these): idle rate per CPU, MemTotal and MemAvailable
IDLE = {"node-a": {"0": 0.75, "1": 0.5}, "node-b": {"0": 0.875}}
MEM_TOTAL = {"node-a": 16 * Gi, "node-b": 8 * Gi}
MEM_AVAILABLE = {"node-a": 12 * Gi, "node-b": 6 * Gi + 512 * Mi}
EXPORTER_POD = {"node-a": "node-exporter-7xk2p", "node-b": "node-exporter-q9d4m"}


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


class Series:
    """The exposition at the moment of each scrape: counters at ``rate * seconds since start``, stamped."""

    def __init__(self) -> None:
        self.start = int(time.time()) - 1

    def __call__(self) -> str:
        now = int(time.time())
        stamp = now * 1000
        elapsed = now - self.start

        def counter(name: str, labels: str, rate: float) -> str:
            return f"{name}{labels} {rate * elapsed!r} {stamp}"

        out = [
            "# TYPE container_cpu_usage_seconds_total counter",
            "# TYPE node_cpu_usage_seconds_total counter",
            "# TYPE node_cpu_seconds_total counter",
        ]
        for c in CONTAINERS:
            labels = _labels(
                namespace=c.namespace,
                pod=c.pod,
                container=c.name,
                node=c.node,
                id=f"/kubepods/pod-{c.pod}/{c.name}",
                image=f"registry.example/{c.name or 'pause'}:1",
            )
            if c.cpu is not None:
                out.append(counter("container_cpu_usage_seconds_total", labels, c.cpu))
            if c.memory is not None:
                out.append(f"container_memory_working_set_bytes{labels} {c.memory}")
        for node, rate in KUBELET_NODE_CPU.items():
            labels = _labels(node=node, metrics_path="/metrics/resource")
            out.append(counter("node_cpu_usage_seconds_total", labels, rate))
            out.append(f"node_memory_working_set_bytes{_labels(node=node)} {KUBELET_NODE_MEMORY[node]}")
        for node, cpus in IDLE.items():
            where = {"job": "node-exporter", "namespace": "monitoring", "pod": EXPORTER_POD[node], "instance": node}
            for cpu, idle in cpus.items():
                out.append(counter("node_cpu_seconds_total", _labels(**where, cpu=cpu, mode="idle"), idle))
                out.append(counter("node_cpu_seconds_total", _labels(**where, cpu=cpu, mode="user"), 1 - idle))
            out.append(f"node_memory_MemTotal_bytes{_labels(**where)} {MEM_TOTAL[node]}")
            out.append(f"node_memory_MemAvailable_bytes{_labels(**where)} {MEM_AVAILABLE[node]}")
            info = _labels(namespace="monitoring", pod=EXPORTER_POD[node], node=node)
            out.append(f"node_namespace_pod:kube_pod_info:{info} 1")
        return "\n".join(out) + "\n"


def populate(kube: FakeKubeAPIServer) -> None:
    """The cluster the series describe: its namespaces, pods and nodes (with their allocatable CPU and memory)."""
    for namespace in ("ml", "serving"):
        kube.put("namespaces", namespace)
    for (namespace, pod), labels in PODS.items():
        kube.put("pods", pod, labels, namespace=namespace)
    for node, (cpu, memory) in NODES.items():
        pool = "infer" if node == "node-b" else "train"
        kube.put("nodes", node, {"pool": pool}, status={"allocatable": {"cpu": str(cpu), "memory": str(memory)}})


@contextmanager
def cadvisor_prometheus(tmp: Path) -> Iterator[Prometheus]:
    """A real Prometheus scraping the series every second, once every counter has two samples (an ``irate``)."""
    with Exporter(Series()) as exporter, run_prometheus(tmp, scrape_targets=[exporter.target]) as prom:
        counters = sum(c.cpu is not None for c in CONTAINERS)
        prom.wait_for("irate(container_cpu_usage_seconds_total[1m])", min_results=counters)
        prom.wait_for("irate(node_cpu_seconds_total[1m])", min_results=6)
        prom.wait_for("irate(node_cpu_usage_seconds_total[1m])", min_results=2)
        yield prom


# What the answers must hold, computed from the tables above.


def container_usage(namespace: str, pod: str) -> dict[str, tuple[Decimal, Decimal]]:
    """Each of a pod's containers: (cores, bytes), as the rules (container!="") select them."""
    return {
        c.name: (Decimal(str(c.cpu or 0)), Decimal(c.memory or 0))
        for c in CONTAINERS
        if (c.namespace, c.pod) == (namespace, pod) and c.name
    }


def pod_usage(namespace: str, pod: str) -> tuple[Decimal, Decimal]:
    usage = container_usage(namespace, pod).values()
    return Decimal(sum(cpu for cpu, _ in usage)), Decimal(sum(memory for _, memory in usage))


def kubelet_node_usage(node: str) -> tuple[Decimal, Decimal]:
    return Decimal(str(KUBELET_NODE_CPU[node])), Decimal(KUBELET_NODE_MEMORY[node])


def node_exporter_usage(node: str) -> tuple[Decimal, Decimal]:
    """kube-prometheus's nodeQuery: the sum over CPUs of 1 - idle; MemTotal - MemAvailable."""
    cpu = sum(Decimal(1) - Decimal(str(idle)) for idle in IDLE[node].values())
    return Decimal(cpu), Decimal(MEM_TOTAL[node] - MEM_AVAILABLE[node])


def kubectl_cpu(cores: Decimal) -> str:
    """How kubectl top prints CPU: milli-cores rounded up (Quantity.MilliValue)."""
    return f"{math.ceil(cores * 1000)}m"


def kubectl_memory(bytes_: Decimal) -> str:
    """How kubectl top prints memory: whole MiB, rounded down."""
    return f"{math.ceil(bytes_) // Mi}Mi"


def kubectl_percent(used_milli: int, available_milli: int) -> str:
    return f"{int(used_milli / available_milli * 100)}%"
