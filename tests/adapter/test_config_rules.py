"""A prometheus-adapter rules file against each real store (Prometheus, VictoriaMetrics): quantities, escaping,
external rules, reload."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote

import pytest

from adapter.naming.resources import GroupResource
from adapter.query.selectors import parse_selector
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.kube.wire import parse_quantity
from harness.stores.exporter import WEIRD_PODS, Exporter
from harness.stores.kinds import on_every_store
from harness.stores.prometheus import Prometheus
from harness.waiting import eventually, wait_until

pytestmark = on_every_store

CM = "/apis/custom.metrics.k8s.io/v1beta2"
EM = "/apis/external.metrics.k8s.io/v1beta1"

CONFIG = """
rules:
- seriesQuery: '{__name__=~"big_value|tiny_value|inf_value|weird_value",namespace!="",pod!=""}'
  resources:
    template: <<.Resource>>
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
externalRules:
- seriesQuery: '{__name__="queue_depth",queue!=""}'
  resources:
    overrides: {namespace: {resource: namespace}}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (queue)'
"""


@pytest.fixture
async def configured(
    kube: FakeKubeAPIServer, store: Prometheus, make_adapter: Callable[..., Awaitable[Adapter]], tmp_path: Path
) -> Adapter:
    return await adapter_with(CONFIG, kube, store, make_adapter, tmp_path)


async def adapter_with(
    rules: str, kube: FakeKubeAPIServer, store: Prometheus, make_adapter: Callable[..., Awaitable[Adapter]], tmp: Path
) -> Adapter:
    config = tmp / "config.yaml"
    config.write_text(rules)
    settings = settings_for(
        store.adapter_url, kube.kubeconfig(tmp / "kubeconfig"), config=config, config_check_interval=0.1
    )
    return await make_adapter(settings)


async def test_only_the_configured_rules_are_served(configured: Adapter) -> None:
    body = await configured.get(CM)
    names = {r["name"] for r in body["resources"]}
    # the scrape's job label is a resource too under <<.Resource>> (jobs.batch), as in prometheus-adapter
    assert names == {
        f"{r}/{m}"
        for r in ("pods", "namespaces", "jobs.batch")
        for m in ("big_value", "tiny_value", "inf_value", "weird_value")
    }
    external = await configured.get(EM)
    assert [r["name"] for r in external["resources"]] == ["queue_depth"]


async def test_large_values_stay_exact(configured: Adapter, store: Prometheus) -> None:
    body = await configured.get(f"{CM}/namespaces/ml/pods/trainer-0/big_value")
    (item,) = body["items"]
    raw = store.query('sum(big_value{pod="trainer-0"}) by (pod)')[0]["value"][1]
    # exactly Prometheus's value; prometheus-adapter's int64 milli-units overflow above 9.2e15
    assert parse_quantity(item["value"]) == Decimal(raw)
    assert Decimal(raw) > Decimal(2**63) / 1000


async def test_small_values_use_the_canonical_suffix(configured: Adapter) -> None:
    body = await configured.get(f"{CM}/namespaces/ml/pods/trainer-0/tiny_value")
    assert body["items"][0]["value"] == "100u"


async def test_infinite_values_are_dropped(configured: Adapter, caplog: pytest.LogCaptureFixture) -> None:
    await configured.get(f"{CM}/namespaces/ml/pods/trainer-0/inf_value", status=404)
    assert "dropped inf_value = +Inf for trainer-0" in caplog.text


@pytest.mark.parametrize(("index", "pod"), list(enumerate(WEIRD_PODS)))
async def test_an_object_name_only_ever_matches_itself(configured: Adapter, index: int, pod: str) -> None:
    body = await configured.get(f"{CM}/namespaces/ml/pods/{quote(pod, safe='')}/weird_value")
    assert [(i["describedObject"]["name"], i["value"]) for i in body["items"]] == [(pod, str(index + 1))]


async def test_a_regex_over_many_names_only_matches_those_names(configured: Adapter, kube: FakeKubeAPIServer) -> None:
    chosen = ["a.b", "pipe|x", "dot.*", 'we"ird', "back\\slash"]
    for pod in chosen:
        kube.put("pods", pod, {"app": "weird"}, namespace="ml")
    pods = configured.components.objects.reflectors[GroupResource("pods")]
    await wait_until(lambda: len(pods.names("ml", parse_selector("app=weird"))) == len(chosen))
    path = f"/explain{CM}/namespaces/ml/pods/*/weird_value"
    report = await configured.get(path, labelSelector="app=weird")
    (query,) = report["queries"]
    # what Prometheus itself returned for the regex: the impostors (aXb, pipe, x, ...) are not there
    assert sorted(s["labels"]["pod"] for s in query["samples"]) == sorted(chosen)
    assert sorted(i["describedObject"]["name"] for i in report["answer"]["items"]) == sorted(chosen)


async def test_external_rules_add_the_namespace_and_the_selector(configured: Adapter) -> None:
    body = await configured.get(f"{EM}/namespaces/ml/queue_depth")
    assert [(i["metricLabels"], i["value"]) for i in body["items"]] == [
        ({"queue": "jobs"}, "42"),
        ({"queue": "mail"}, "7"),
    ]
    body = await configured.get(f"{EM}/namespaces/ml/queue_depth", labelSelector="queue=jobs")
    assert [i["value"] for i in body["items"]] == ["42"]
    body = await configured.get(f"{EM}/namespaces/other/QUEUE_DEPTH")
    assert [(i["metricName"], i["value"]) for i in body["items"]] == [("QUEUE_DEPTH", "5")]
    body = await configured.get(f"{EM}/namespaces/empty/queue_depth")
    assert body["items"] == []


EXTERNAL_FUNCTIONS = """
externalRules:
- seriesQuery: '{__name__="queue_depth",queue!=""}'
  resources: {overrides: {namespace: {resource: namespace}}}
  name: {matches: "^queue_depth$", as: "queue_peak"}
  metricsQuery: 'max_over_time(<<.Series>>{<<.LabelMatchers>>}[1m])'
- seriesQuery: '{__name__="queue_depth",queue!=""}'
  resources: {overrides: {namespace: {resource: namespace}}}
  name: {matches: "^queue_depth$", as: "queue_suffix"}
  metricsQuery: 'sum by (suffix) (label_replace(<<.Series>>{<<.LabelMatchers>>}, "suffix", "$1", "queue", "j(.*)"))'
"""


async def test_external_labels_are_the_same_whatever_the_store_keeps(
    kube: FakeKubeAPIServer,
    store: Prometheus,
    exporter: Exporter,
    make_adapter: Callable[..., Awaitable[Adapter]],
    tmp_path: Path,
) -> None:
    """MetricsQL keeps the series name through max_over_time (PromQL drops it) and gives label_replace's label an
    empty value where its regex did not match (PromQL leaves the label out): neither reaches metricLabels."""
    adapter = await adapter_with(EXTERNAL_FUNCTIONS, kube, store, make_adapter, tmp_path)
    body = await adapter.get(f"{EM}/namespaces/ml/queue_peak", labelSelector="queue=jobs")
    scraped = {"instance": exporter.target, "job": "gpuscale-collector", "namespace": "ml"}
    assert [(i["metricLabels"], i["value"]) for i in body["items"]] == [({**scraped, "queue": "jobs"}, "42")]
    body = await adapter.get(f"{EM}/namespaces/ml/queue_suffix")
    # the regex is anchored in both languages: "mail" does not match j(.*), "jobs" gives "obs"
    assert [(i["metricLabels"], i["value"]) for i in body["items"]] == [({}, "7"), ({"suffix": "obs"}, "42")]


async def test_rules_file_changes_are_picked_up_and_broken_edits_refused(
    configured: Adapter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        CONFIG
        + """- seriesQuery: '{__name__="queue_depth",queue!=""}'
  resources: {namespaced: false}
  name: {matches: "^queue_depth$", as: "all_queues"}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>})'
"""
    )

    async def served() -> set[str]:
        return {r["name"] for r in (await configured.get(EM))["resources"]}

    async def reloaded() -> bool:
        return await served() == {"queue_depth", "all_queues"}

    await eventually(reloaded, what="the new rule to be served")
    body = await configured.get(f"{EM}/namespaces/ml/all_queues")
    assert [i["value"] for i in body["items"]] == ["54"]

    config.write_text("rules:\n- seriesQuery: up\n  nmae: {}\n")
    registry = configured.components.metrics.registry
    await wait_until(
        lambda: registry.get_sample_value("gpuscale_adapter_config_reloads_total", {"result": "error"}) == 1
    )
    assert "unknown key 'nmae'" in caplog.text
    assert await served() == {"queue_depth", "all_queues"}
    assert registry.get_sample_value("gpuscale_adapter_config_last_reload_successful") == 0
    config.write_text(CONFIG)
    await wait_until(lambda: registry.get_sample_value("gpuscale_adapter_config_last_reload_successful") == 1)
