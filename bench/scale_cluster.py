"""The simulated large cluster of bench/scale_bench.py: its pods, its GPU series, and the API stand-in serving it.

One pod per GPU (``gpu-NNNNN``, labelled ``app=hpa-JJJJ``: pod k belongs to HPA k mod --hpas, so each HPA's pods sit
on different nodes), and CPU pods (``cpu-NNNNNN``) filling the rest of --pods, spread over --namespaces namespaces.

    python -m bench.scale_cluster serve DIR [--nodes 2000 ...] [--churn 1]

serves the pods from harness/kube's API stand-in in its own process, writes DIR/kubeconfig, then DIR/lists (LIST
requests served so far) every second; --churn replaces that many CPU pods a second (a delete and an add, each a
watch event).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]

from harness.kube.api import FakeKubeAPIServer  # noqa: E402
from harness.kube.wire import META_GROUP_VERSION, PARTIAL, LabelSelector, SelectorError, partial, status_body  # noqa: E402

# the series the built-in rules read, as the collector labels them (honorLabels: true)
FIELDS: dict[str, Callable[[int], str]] = {
    "DCGM_FI_DEV_GPU_UTIL": lambda k: f"{(k * 7) % 100}",
    "DCGM_FI_DEV_FB_USED": lambda k: f"{1024 + (k * 131) % 80000}",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": lambda k: f"{(k * 13) % 100 / 100}",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": lambda k: f"{(k * 7) % 100 / 100}",
    "DCGM_FI_PROF_SM_ACTIVE": lambda k: f"{(k * 11) % 100 / 100}",
    "DCGM_FI_PROF_DRAM_ACTIVE": lambda k: f"{(k * 3) % 100 / 100}",
}


@dataclass(frozen=True)
class Cluster:
    nodes: int = 2000
    gpus_per_node: int = 8
    pods: int = 100_000
    hpas: int = 1000
    namespaces: int = 100

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def namespace(self, hpa: int) -> str:
        return f"team-{hpa % self.namespaces:03d}"

    @staticmethod
    def app(hpa: int) -> str:
        return f"hpa-{hpa:04d}"

    def pods_per_hpa(self, hpa: int) -> int:
        return len(range(hpa, self.gpus, self.hpas))

    def gpu_pods(self) -> Iterator[tuple[str, str, dict[str, str]]]:
        for k in range(self.gpus):
            yield self.namespace(k % self.hpas), f"gpu-{k:05d}", {"app": self.app(k % self.hpas), "tier": "gpu"}

    def cpu_pod(self, c: int) -> tuple[str, str, dict[str, str]]:
        return f"team-{c % self.namespaces:03d}", f"cpu-{c:06d}", {"app": f"svc-{c % 500}", "tier": "cpu"}

    def exposition(self, first_node: int, nodes: int) -> bytes:
        """The GPU series of nodes [first_node, first_node + nodes), as one collector per node would serve them."""
        out = [f"# TYPE {name} gauge" for name in FIELDS]
        for name, value in FIELDS.items():
            for k in range(first_node * self.gpus_per_node, (first_node + nodes) * self.gpus_per_node):
                node, gpu = divmod(k, self.gpus_per_node)
                out.append(
                    f'{name}{{gpu="{gpu}",UUID="GPU-{k:05d}",device="nvidia{gpu}",modelName="NVIDIA H200",'
                    f'Hostname="node-{node:04d}",pod="gpu-{k:05d}",namespace="{self.namespace(k % self.hpas)}",'
                    f'container="main"}} {value(k)}'
                )
        out.append("# TYPE gpuscale_collector_nvml_up gauge\ngpuscale_collector_nvml_up 1")
        return ("\n".join(out) + "\n").encode()


class NamespacedAPI(FakeKubeAPIServer):
    """A namespaced LIST reads only its namespace's objects, as kube-apiserver's storage (keyed by namespace) does;
    the stand-in's own LIST walks and sorts every object of the resource, 100,000 pods for each request."""

    def __init__(self) -> None:
        super().__init__()
        self.by_namespace: dict[tuple[str, str | None], dict[str, dict[str, Any]]] = {}
        self.lists = 0

    def put(
        self,
        resource: str,
        name: str,
        labels: dict[str, str] | None = None,
        namespace: str | None = None,
        uid: str | None = None,
        spec: dict[str, Any] | None = None,
        data: dict[str, str] | None = None,
        status: dict[str, Any] | None = None,
    ) -> None:
        super().put(resource, name, labels, namespace, uid, spec, data, status)
        self.by_namespace.setdefault((resource, namespace), {})[name] = self.objects[resource][(namespace, name)]

    def delete(self, resource: str, name: str, namespace: str | None = None) -> None:
        super().delete(resource, name, namespace)
        del self.by_namespace[(resource, namespace)][name]

    def _list(self, resource: str, namespace: str | None, query: dict[str, str], metadata_only: bool) -> web.Response:
        self.lists += 1
        if namespace is None or set(query) - {"labelSelector", "resourceVersion"}:
            return super()._list(resource, namespace, query, metadata_only)
        try:
            selector = LabelSelector(query.get("labelSelector", ""))
        except SelectorError as e:
            return web.json_response(status_body(400, "BadRequest", str(e)), status=400)
        objects = self.by_namespace.get((resource, namespace), {})
        items = [objects[n] for n in sorted(objects) if selector.matches(objects[n]["metadata"].get("labels", {}))]
        served = self.discovery.find(resource)
        kind, api_version = f"{served.kind}List" if served is not None else "List", "v1"
        if metadata_only:
            kind, api_version, items = f"{PARTIAL}List", META_GROUP_VERSION, [partial(obj) for obj in items]
        metadata = {"resourceVersion": str(self.resource_version)}
        return web.json_response({"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": items})


async def serve(cluster: Cluster, out: Path, churn: float) -> None:
    api = NamespacedAPI()
    for n in range(cluster.namespaces):
        api.put("namespaces", f"team-{n:03d}")
    for node in range(cluster.nodes):
        api.put("nodes", f"node-{node:04d}")
    for namespace, name, labels in cluster.gpu_pods():
        api.put("pods", name, labels, namespace=namespace)
    cpu_pods = max(0, cluster.pods - cluster.gpus)
    for c in range(cpu_pods):
        namespace, name, labels = cluster.cpu_pod(c)
        api.put("pods", name, labels, namespace=namespace)
    api.history.clear()  # the initial puts are no watch history anyone asks for; a 410 makes a watcher list again
    api.compacted = api.resource_version
    await api.start()
    api.kubeconfig(out / "kubeconfig.tmp").rename(out / "kubeconfig")
    replaced = itertools.count()
    tick = 0.0
    while True:
        await asyncio.sleep(1.0)
        (out / "lists").write_text(json.dumps({"lists": api.lists}))
        tick += churn
        while cpu_pods and tick >= 1:
            tick -= 1
            r = next(replaced)
            old = r % cpu_pods
            namespace, name, labels = cluster.cpu_pod(old)
            gone = name if r < cpu_pods else f"{name}-{r // cpu_pods - 1}"
            api.delete("pods", gone, namespace)
            api.put("pods", f"{name}-{r // cpu_pods}", labels, namespace=namespace)
        # a watch cache keeps a bounded history too (kube-apiserver's: a few minutes); the stand-in's keeps every
        # event and every request it served
        if len(api.history) > 10_000:
            del api.history[:-1000]
            api.compacted = api.history[0][0] - 1
        api.requests.clear()


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--hpas", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=100)


def cluster_of(args: argparse.Namespace) -> Cluster:
    return Cluster(args.nodes, args.gpus_per_node, args.pods, args.hpas, args.namespaces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("dir", type=Path)
    s.add_argument("--churn", type=float, default=0.0, help="CPU pods replaced per second")
    add_cluster_arguments(s)
    args = parser.parse_args()
    if cpu := os.environ.get("SCALE_BENCH_CPU"):
        os.sched_setaffinity(0, {int(cpu)})
    asyncio.run(serve(cluster_of(args), args.dir, args.churn))


if __name__ == "__main__":
    main()
