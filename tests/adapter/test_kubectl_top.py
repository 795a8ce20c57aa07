"""``kubectl top`` against metrics.k8s.io as a cluster serves it: a real kubectl asks the stand-in API server, whose
aggregation layer proxies ``/apis/metrics.k8s.io`` to ``python -m adapter`` (HTTPS, front-proxy authentication,
SubjectAccessReviews), started with prometheus-adapter's and kube-prometheus's own configuration files over a real
Prometheus holding cAdvisor, kubelet and node-exporter series. The numbers kubectl prints are computed by hand from
the series written (harness/stores/cadvisor.py)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from adapter.security.tls import self_signed
from harness.adapter.process import secure_adapter
from harness.kube.aggregator import ADMIN, APIService, Endpoints
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import Cluster
from harness.kube.kubectl import kubectl_binary, run
from harness.kube.pki import client_context
from harness.kube.reviews import ReviewUser
from harness.kube.wire import parse_quantity
from harness.stores.cadvisor import (
    ANSWERED_PODS,
    NODES,
    cadvisor_prometheus,
    container_usage,
    kubectl_cpu,
    kubectl_memory,
    kubectl_percent,
    kubelet_node_usage,
    node_exporter_usage,
    pod_usage,
    populate,
)
from harness.stores.prometheus import Prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

CONFIGS = Path(__file__).parent / "resource_configs"
# the APIServices a cluster may have for the group: before Kubernetes 1.37 (v1beta1), both, or v1 once v1beta1 is gone;
# v1's versionPriority is the manifests' (manifests/components/resource-metrics/apiservice.yaml)
VERSION_PRIORITY = {"v1": 200, "v1beta1": 100}
# what each configuration's nodeQuery reads: the kubelet's node_* series, or node-exporter's
NODE_USAGE: dict[str, Callable[[str], tuple[Decimal, Decimal]]] = {
    "prometheus-adapter": kubelet_node_usage,
    "kube-prometheus": node_exporter_usage,
}


@pytest.fixture(scope="module")
def cadvisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with cadvisor_prometheus(tmp_path_factory.mktemp("cadvisor")) as prom:
        yield prom


class Top:
    def __init__(self, kube: FakeKubeAPIServer, workdir: Path, config: str) -> None:
        self.kube = kube
        self.kubeconfig = kube.kubeconfig(workdir / "kubeconfig")
        self.cache = workdir / "kube-cache"
        self.config = config

    async def run(self, *args: str) -> tuple[int, str, str]:
        return await run(kubectl_binary(), f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.cache}", *args)

    async def rows(self, *args: str) -> list[list[str]]:
        """``kubectl top ARGS``'s table, header first, each row split into its columns."""
        rc, out, err = await self.run("top", *args)
        assert rc == 0, err
        return [line.split() for line in out.splitlines()]


@contextlib.asynccontextmanager
async def cluster_serving(
    cadvisor: Prometheus, tmp_path: Path, config: str, versions: tuple[str, ...]
) -> AsyncIterator[Top]:
    """The stand-in API server with an APIService for each of ``versions`` of metrics.k8s.io, all pointing at one
    adapter started with ``resource_configs/{config}.yaml``."""
    kube = FakeKubeAPIServer()
    populate(kube)
    # over TLS: kubectl sends its bearer token to no other server
    cert_pem, key_pem = self_signed(["127.0.0.1"])
    (cert := tmp_path / "apiserver.crt").write_bytes(cert_pem)
    (key := tmp_path / "apiserver.key").write_bytes(key_pem)
    await kube.start(serving=(cert, key))
    cluster = Cluster()
    kube.reviews.grant(user=ADMIN.username, verbs=("get", "list"), api_groups=("metrics.k8s.io",))
    try:
        async with secure_adapter(
            kube, cadvisor.url, tmp_path, f"--config={CONFIGS / config}.yaml", cluster=cluster
        ) as adapter:
            # the APIServices: the adapter's certificate as caBundle, the front-proxy client certificate to present
            tls = client_context(adapter.cert, cluster.front_proxy, tmp_path / "aggregator")
            for version in versions:
                service = APIService("metrics.k8s.io", version, Endpoints(adapter.url), tls, VERSION_PRIORITY[version])
                kube.aggregator.services.append(service)
            yield Top(kube, tmp_path, config)
    finally:
        await kube.stop()


@pytest.fixture(params=sorted(NODE_USAGE))
async def top(request: pytest.FixtureRequest, cadvisor: Prometheus, tmp_path: Path) -> AsyncIterator[Top]:
    """A cluster as the resource-metrics component makes one on Kubernetes 1.37: both versions served."""
    async with cluster_serving(cadvisor, tmp_path, request.param, ("v1beta1", "v1")) as top:
        yield top


def expected_pods(namespace: str | None) -> dict[tuple[str, str], list[str]]:
    return {
        (ns, pod): [kubectl_cpu(pod_usage(ns, pod)[0]), kubectl_memory(pod_usage(ns, pod)[1])]
        for ns, pod in sorted(ANSWERED_PODS)
        if namespace in (None, ns)
    }


async def test_kubectl_top_pods_prints_each_pods_usage(top: Top) -> None:
    rows = await top.rows("pods", "-n", "ml")
    assert rows[0] == ["NAME", "CPU(cores)", "MEMORY(bytes)"]
    # broken-0 (NaN memory), idle-0 (no memory series) and new-0 (no series) are left out; gone-0 is not a pod
    assert {("ml", r[0]): r[1:] for r in rows[1:]} == expected_pods("ml")
    assert expected_pods("ml")[("ml", "trainer-0")] == ["375m", "120Mi"]  # the hand computation, spelled out

    rows = await top.rows("pods", "--all-namespaces")
    assert rows[0] == ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"]
    assert {(r[0], r[1]): r[2:] for r in rows[1:]} == expected_pods(None)

    rows = await top.rows("pods", "-n", "ml", "-l", "app=trainer")
    assert [r[0] for r in rows[1:]] == ["trainer-0", "trainer-1"]

    rows = await top.rows("pod", "trainer-1", "-n", "ml")
    assert rows[1:] == [["trainer-1", *expected_pods("ml")[("ml", "trainer-1")]]]


async def test_kubectl_top_pods_prints_each_containers_usage(top: Top) -> None:
    rows = await top.rows("pods", "-n", "ml", "--containers")
    assert rows[0] == ["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"]
    expected = {
        (pod, container): [kubectl_cpu(cpu), kubectl_memory(memory)]
        for ns, pod in ANSWERED_PODS
        if ns == "ml"
        for container, (cpu, memory) in container_usage(ns, pod).items()
    }
    assert {(r[0], r[1]): r[2:] for r in rows[1:]} == expected
    assert expected[("mixed-0", "helper")] == ["125m", "0Mi"]  # CPU without memory: memory 0, as prometheus-adapter


async def test_kubectl_top_pod_without_metrics_is_not_found(top: Top) -> None:
    rc, _, err = await top.run("top", "pod", "new-0", "-n", "ml")
    assert rc == 1
    assert 'podmetrics.metrics.k8s.io "ml/new-0" not found' in err


async def test_kubectl_top_nodes_prints_usage_and_share_of_allocatable(top: Top) -> None:
    usage = NODE_USAGE[top.config]
    rows = await top.rows("nodes")
    assert rows[0] == ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"]
    expected = {}
    for node in ("node-a", "node-b"):
        cpu, memory = usage(node)
        cpu_cores, memory_bytes = NODES[node]
        expected[node] = [
            kubectl_cpu(cpu),
            kubectl_percent(int(cpu * 1000), cpu_cores * 1000),
            kubectl_memory(memory),
            kubectl_percent(int(memory * 1000), memory_bytes * 1000),
        ]
    expected["node-c"] = ["<unknown>"] * 4  # no series: the metrics API leaves it out, kubectl lists it so
    assert {r[0]: r[1:] for r in rows[1:]} == expected

    rows = await top.rows("node", "node-b")
    assert rows[1:] == [["node-b", *expected["node-b"]]]
    rows = await top.rows("nodes", "-l", "pool=train")
    assert {r[0] for r in rows[1:]} == {"node-a", "node-c"}


async def test_requests_reach_the_adapter_as_the_aggregator_sends_them(top: Top) -> None:
    await top.rows("pods", "-n", "ml")
    proxied = [headers for path, headers in top.kube.aggregator.proxied if "/pods" in path]
    assert proxied
    assert all("Authorization" not in h and h["X-Remote-User"] == ADMIN.username for h in proxied)
    # the adapter asked the API server whether the user may list pods of metrics.k8s.io in ml
    reviews = [r["resourceAttributes"] for r in top.kube.reviews.access_reviews if "resourceAttributes" in r]
    assert {"group": "metrics.k8s.io", "resource": "pods", "verb": "list", "namespace": "ml"}.items() <= (
        reviews[-1].items()
    )

    top.kube.aggregator.user = ReviewUser("intruder", groups=("system:authenticated",))
    rc, _, err = await top.run("top", "pods", "-n", "ml")
    assert rc == 1
    assert "Forbidden" in err


@pytest.mark.parametrize(
    ("served", "listed"),
    [(("v1beta1",), ["v1beta1"]), (("v1",), ["v1"]), (("v1beta1", "v1"), ["v1", "v1beta1"])],
    ids=["v1beta1", "v1", "both"],
)
async def test_kubectl_top_asks_for_the_version_discovery_prefers(
    cadvisor: Prometheus, tmp_path: Path, served: tuple[str, ...], listed: list[str]
) -> None:
    async with cluster_serving(cadvisor, tmp_path, "prometheus-adapter", served) as top:
        rc, out, err = await top.run("get", "--raw", "/apis")
        assert rc == 0, err
        group = {g["name"]: g for g in json.loads(out)["groups"]}["metrics.k8s.io"]
        assert [v["version"] for v in group["versions"]] == listed
        asked = group["preferredVersion"]["version"]
        assert asked == listed[0]
        rows = await top.rows("pods", "-n", "ml")
        assert {("ml", r[0]): r[1:] for r in rows[1:]} == expected_pods("ml")
        rows = await top.rows("pod", "trainer-1", "-n", "ml")
        assert rows[1:] == [["trainer-1", *expected_pods("ml")[("ml", "trainer-1")]]]
        rows = await top.rows("nodes")
        cpu, memory = kubelet_node_usage("node-a")
        assert {r[0]: (r[1], r[3]) for r in rows[1:]}["node-a"] == (kubectl_cpu(cpu), kubectl_memory(memory))
        # every request went to that version, and kubectl read each answer as that version's objects
        prefix = f"/apis/metrics.k8s.io/{asked}"
        proxied = {path.split("?")[0] for path, _ in top.kube.aggregator.proxied}
        assert all(p == prefix or p.startswith(prefix + "/") for p in proxied), proxied
        assert {f"{prefix}/namespaces/ml/pods", f"{prefix}/namespaces/ml/pods/trainer-1", f"{prefix}/nodes"} <= proxied


async def test_kubectl_get_prints_metrics_servers_columns(top: Top) -> None:
    # legacy discovery: the stand-in's aggregated discovery lists an APIService's versions without their resources,
    # which kubectl get needs to find pods.metrics.k8s.io (kube-apiserver reads them from the extension server)
    top.kube.discovery.aggregated = ()
    rc, out, err = await top.run("get", "pods.metrics.k8s.io", "-n", "ml")
    assert rc == 0, err
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["NAME", "CPU", "MEMORY", "WINDOW"]
    assert sorted(r[0] for r in rows[1:]) == sorted(pod for ns, pod in ANSWERED_PODS if ns == "ml")
    for name, cpu, memory, window in rows[1:]:
        assert (parse_quantity(cpu), parse_quantity(memory)) == pod_usage("ml", name)
        assert window == "5m0s"
    rc, out, err = await top.run("get", "nodes.metrics.k8s.io")
    assert rc == 0, err
    assert out.splitlines()[0].split() == ["NAME", "CPU", "MEMORY", "WINDOW"]
    assert sorted(line.split()[0] for line in out.splitlines()[1:]) == ["node-a", "node-b"]  # node-c has no series
