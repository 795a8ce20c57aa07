"""The built-in GPU rules read dcgm-exporter 4.8's names and 4.9's (DCGM 4.7), each in its own unit, through a real
Prometheus: a GPU exporting ``DCGM_FI_DEV_GPU_UTIL_RATIO`` 0.955 gives the same ``gpu_utilization`` 95.5 % as one
exporting ``DCGM_FI_DEV_GPU_UTIL`` 95.5, for pods, namespaces, nodes and the external metric."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.exporter import Exporter, exposition
from harness.stores.prometheus import Prometheus, run_prometheus

CM = "/apis/custom.metrics.k8s.io"
EM = "/apis/external.metrics.k8s.io"
MIB = 1024 * 1024


def _gpu(uuid: str, gpu: str, host: str, pod: str) -> dict[str, str]:
    return {"gpu": gpu, "UUID": uuid, "Hostname": host, "pod": pod, "namespace": "ml", "container": "main"}


# trainer-0 on node-a is read by a 4.8 exporter, trainer-1 on node-b by a 4.9 one: the same readings
LINES = [
    ("DCGM_FI_DEV_GPU_UTIL", _gpu("GPU-a0", "0", "node-a", "trainer-0"), "95.5"),
    ("DCGM_FI_DEV_FB_USED", _gpu("GPU-a0", "0", "node-a", "trainer-0"), "40000"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", _gpu("GPU-a0", "0", "node-a", "trainer-0"), "0.9"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", _gpu("GPU-a0", "0", "node-a", "trainer-0"), "0.5"),
    ("DCGM_FI_DEV_GPU_UTIL_RATIO", _gpu("GPU-b0", "0", "node-b", "trainer-1"), "0.955"),
    ("DCGM_FI_DEV_FB_USED_BYTES", _gpu("GPU-b0", "0", "node-b", "trainer-1"), str(40000 * MIB)),
    ("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", _gpu("GPU-b0", "0", "node-b", "trainer-1"), "0.9"),
    ("DCGM_FI_PROF_TENSOR_UTIL_RATIO", _gpu("GPU-b0", "0", "node-b", "trainer-1"), "0.5"),
]


@pytest.fixture(scope="module")
def both_spellings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with (
        Exporter(exposition(LINES)) as exporter,
        run_prometheus(tmp_path_factory.mktemp("prometheus"), [exporter.target]) as prom,
    ):
        for name, _, _ in LINES:
            prom.wait_for(name)
        yield prom


@pytest.fixture
async def kube() -> Any:
    fake = FakeKubeAPIServer()
    fake.put("namespaces", "ml", {"team": "ml"})
    for node in ("node-a", "node-b"):
        fake.put("nodes", node, {"pool": "train"})
    for pod in ("trainer-0", "trainer-1"):
        fake.put("pods", pod, {"app": "trainer"}, namespace="ml")
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def adapter(
    kube: FakeKubeAPIServer,
    both_spellings: Prometheus,
    make_adapter: Callable[..., Awaitable[Adapter]],
    tmp_path: Path,
) -> Adapter:
    return await make_adapter(settings_for(both_spellings.adapter_url, kube.kubeconfig(tmp_path / "kubeconfig")))


def values(body: dict[str, Any]) -> dict[str, str]:
    return {item["describedObject"]["name"]: item["value"] for item in body["items"]}


@pytest.mark.prometheus
async def test_pods_read_either_spelling_in_the_same_units(adapter: Adapter) -> None:
    for metric, want in [
        ("gpu_utilization", "95500m"),
        ("gpu_memory_used", "40k"),
        ("gpu_engine_active", "90"),
        ("gpu_tensor_active", "500m"),
    ]:
        body = await adapter.get(f"{CM}/v1beta2/namespaces/ml/pods/*/{metric}", labelSelector="app=trainer")
        assert values(body) == {"trainer-0": want, "trainer-1": want}, metric


@pytest.mark.prometheus
async def test_nodes_namespaces_and_external_metrics_read_either_spelling(adapter: Adapter) -> None:
    body = await adapter.get(f"{CM}/v1beta2/nodes/*/gpu_utilization")
    assert values(body) == {"node-a": "95500m", "node-b": "95500m"}
    body = await adapter.get(f"{CM}/v1beta2/namespaces/ml/metrics/gpu_utilization")
    assert values(body) == {"ml": "95500m"}
    for host in ("node-a", "node-b"):
        body = await adapter.get(f"{EM}/v1beta1/namespaces/ml/gpu_utilization", labelSelector=f"Hostname={host}")
        assert [i["value"] for i in body["items"]] == ["95500m"], host
        body = await adapter.get(f"{EM}/v1beta1/namespaces/ml/gpu_memory_used", labelSelector=f"Hostname={host}")
        assert [i["value"] for i in body["items"]] == ["40k"], host
