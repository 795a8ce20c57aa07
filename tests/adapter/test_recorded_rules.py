"""The built-in rules over the recorded series of manifests/prometheus/gpuscale-rules.yaml: with the recording rules
loaded, one query of the recorded series answers what the rules over the collector's series answer without them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.exporter import Exporter
from harness.stores.prometheus import Prometheus, run_prometheus

pytestmark = pytest.mark.prometheus

CM = "/apis/custom.metrics.k8s.io/v1beta2"
RULES = Path(__file__).resolve().parents[2] / "manifests" / "prometheus" / "gpuscale-rules.yaml"
REQUESTS = [
    (
        "namespaces/ml/pods/*/gpu_utilization",
        {"labelSelector": "app=trainer"},
        "namespace_pod:dcgm_gpu_utilization:avg",
    ),
    ("namespaces/ml/pods/trainer-0/gpu_memory_used", {}, "namespace_pod:dcgm_fb_used_mib:sum"),
    ("namespaces/ml/pods/trainer-0/gpu_tensor_active", {}, "namespace_pod:dcgm_tensor_active:avg"),
    # scraped without honorLabels (exported_pod): the recording rules take the renamed labels back
    ("namespaces/serving/pods/*/gpu_utilization", {}, "namespace_pod:dcgm_gpu_utilization:avg"),
    ("namespaces/ml/metrics/gpu_memory_used", {}, "namespace:dcgm_fb_used_mib:sum"),
    ("namespaces/ml/metrics/gpu_tensor_active", {}, "namespace:dcgm_tensor_active:avg"),
]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory, exporter: Exporter) -> Iterator[Prometheus]:
    extra = {"rule_files": [str(RULES)]}
    with run_prometheus(tmp_path_factory.mktemp("recording"), [exporter.target], extra_config=extra) as prom:
        prom.wait_for('namespace_pod:dcgm_gpu_utilization:avg{pod="trainer-0"}')
        prom.wait_for('namespace_pod:dcgm_gpu_utilization:avg{pod="infer-0"}')
        prom.wait_for('namespace:dcgm_fb_used_mib:sum{namespace="ml"}')
        yield prom


def values(body: dict[str, Any]) -> dict[str, str]:
    items = body.get("items", [body])  # a single object's answer is one MetricValue
    return {i["describedObject"]["name"]: i["value"] for i in items}


@pytest.mark.parametrize(("path", "params", "recorded"), REQUESTS)
async def test_one_query_of_the_recorded_series_answers_as_the_raw_series_do(
    path: str,
    params: dict[str, str],
    recorded: str,
    recording: Prometheus,
    prometheus: Prometheus,
    kube: FakeKubeAPIServer,
    make_adapter: Callable[..., Awaitable[Adapter]],
    tmp_path: Path,
) -> None:
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
    with_rules = await make_adapter(settings_for(recording.url, kubeconfig))
    without = await make_adapter(settings_for(prometheus.url, kubeconfig))

    report = await with_rules.get(f"/explain{CM}/{path}", 200, **params)
    (query,) = report["queries"]
    assert f"{recorded}{{" in query["promql"], query["promql"]
    raw = await without.get(f"/explain{CM}/{path}", 200, **params)
    assert all(recorded not in q["promql"] for q in raw["queries"]), "no recording rules there, no recorded rule"
    assert values(report["answer"]) == values(raw["answer"])
    assert values(report["answer"]), "a comparison of two empty answers shows nothing"
