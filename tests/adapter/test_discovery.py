"""Discovery against each real store (Prometheus, VictoriaMetrics): which metrics each rule exposes, and what survives
a failed relist."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapter.backends.prometheus import PrometheusClient, PrometheusConfig, make_session
from adapter.config.rules import load_rules, parse_rules
from adapter.config.rules_file import RulesFile
from adapter.naming import resources
from adapter.naming.resources import GroupResource
from adapter.provider.discovery import Discovery, build_catalog, discover
from adapter.self_metrics import AdapterMetrics
from harness.stores.kinds import on_every_store
from harness.stores.prometheus import Prometheus
from harness.stores.proxy import PrometheusProxy

GPU = "DCGM_FI_DEV_GPU_UTIL"


@pytest.fixture
async def client(store: Prometheus) -> AsyncIterator[PrometheusClient]:
    config = PrometheusConfig(url=store.adapter_url)
    c = PrometheusClient(make_session(config), config, AdapterMetrics())
    yield c
    await c.session.close()


async def catalog_for(rules_text: str, client: PrometheusClient) -> dict[tuple[str, str], list[str]]:
    now = time.time()
    catalog = await discover(parse_rules(rules_text, "cfg"), client, now - 600, now)
    return {(n, str(gr)): [s.series for s in m.sources] for (n, gr), m in catalog.custom.items()}


@on_every_store
async def test_default_rules_find_both_label_spellings(client: PrometheusClient) -> None:
    now = time.time()
    catalog = await discover(load_rules(None), client, now - 600, now)
    pods = catalog.custom_metric("gpu_utilization", GroupResource("pods"))
    assert pods is not None
    assert pods.discovered
    # rules[0] and [1] read recorded series, which this Prometheus has not (no recording rules)
    assert [s.rule.where for s in pods.sources] == [
        "built-in default rules: rules[2]",
        "built-in default rules: rules[3]",
    ]
    nodes = catalog.custom_metric("gpu_memory_used", GroupResource("nodes"))
    assert nodes is not None
    assert [s.rule.where for s in nodes.sources] == ["built-in default rules: rules[12]"]
    external = catalog.external_metric("GPU_TENSOR_ACTIVE")
    assert external is not None
    assert external.name == "gpu_tensor_active"


@on_every_store
async def test_regex_rules_filters_and_name_templates(client: PrometheusClient) -> None:
    found = await catalog_for(
        """
rules:
- seriesQuery: '{__name__=~"DCGM_FI_.*",namespace!="",pod!=""}'
  seriesFilters: [{isNot: "_TENSOR_"}]
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {matches: "^DCGM_FI_DEV_(.*)$", as: "dcgm_${1}"}
  metricsQuery: 'avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
""",
        client,
    )
    assert found == {
        ("dcgm_GPU_UTIL", "pods"): [GPU],
        ("dcgm_GPU_UTIL", "namespaces"): [GPU],
        ("dcgm_FB_USED", "pods"): ["DCGM_FI_DEV_FB_USED"],
        ("dcgm_FB_USED", "namespaces"): ["DCGM_FI_DEV_FB_USED"],
    }


@on_every_store
async def test_template_rules_find_resources_from_label_names(client: PrometheusClient) -> None:
    found = await catalog_for(
        """
rules:
- seriesQuery: 'queue_depth'
  resources: {template: "<<.Resource>>"}
""",
        client,
    )
    # queue_depth carries namespace and job (resources: an empty group matches any group, as in prometheus-adapter,
    # so job is jobs.batch), queue and instance (not resources)
    assert found == {("queue_depth", "namespaces"): ["queue_depth"], ("queue_depth", "jobs.batch"): ["queue_depth"]}


@on_every_store
async def test_namespaced_resources_need_the_namespace_label(client: PrometheusClient) -> None:
    found = await catalog_for(
        """
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{Hostname!=""}'
  resources: {overrides: {pod: {resource: pod}, Hostname: {resource: node}}}
""",
        client,
    )
    assert found == {("DCGM_FI_DEV_GPU_UTIL", "nodes"): [GPU]}


async def test_declared_metrics_are_served_before_and_without_any_relist() -> None:
    catalog = build_catalog(load_rules(None))
    for name in ("gpu_utilization", "gpu_memory_used", "gpu_tensor_active"):
        for resource in ("pods", "namespaces", "nodes"):
            metric = catalog.custom_metric(name, GroupResource(resource))
            assert metric is not None
            assert not metric.discovered
    pods = catalog.custom_metric("gpu_utilization", GroupResource("pods"))
    assert pods is not None
    series = [source.series for source in pods.sources]
    # the recorded per-pod series first (manifests/prometheus), the collector's own wherever nothing is recorded
    assert series[0] == "namespace_pod:dcgm_gpu_utilization:avg"
    assert GPU in series


async def test_a_failed_relist_keeps_the_last_good_catalog(prometheus: Prometheus, tmp_path: Path) -> None:
    proxy = PrometheusProxy(prometheus.url)
    await proxy.start()
    config = tmp_path / "config.yaml"
    config.write_text(
        "rules:\n"
        '- seriesQuery: \'{__name__=~"DCGM_.*",Hostname!=""}\'\n'
        "  resources: {overrides: {Hostname: {resource: node}}}\n"
    )
    metrics = AdapterMetrics()
    prom_config = PrometheusConfig(url=proxy.url, discovery_timeout=2)
    client = PrometheusClient(make_session(prom_config), prom_config, metrics)
    try:
        trims: list[float] = []
        discovery = Discovery(
            RulesFile(config, metrics), client, metrics, interval=60, max_age=600, trim=lambda: trims.append(1)
        )
        assert discovery.catalog.custom == {}  # nothing declared: the rule pins no series name
        await discovery.relist()
        found = set(discovery.catalog.custom)
        assert ("DCGM_FI_DEV_GPU_UTIL", GroupResource("nodes")) in found
        await proxy.stop()
        await discovery.relist()
        assert set(discovery.catalog.custom) == found
        assert "unreachable" in (discovery.catalog.error or "")
        assert metrics.registry.get_sample_value("gpuscale_adapter_discovery_runs_total", {"result": "error"}) == 1
        await proxy.start()
        await discovery.relist()
        assert discovery.catalog.error is None
        assert metrics.registry.get_sample_value("gpuscale_adapter_discovered_metrics", {"api": "custom"}) == len(found)
        assert len(trims) == 3  # the heap is trimmed after every relist, failed or not
    finally:
        await client.session.close()
        await proxy.close()


async def test_similar_names_and_resources_of_a_metric() -> None:
    catalog = build_catalog(load_rules(None))
    assert catalog.resources_of("gpu_utilization") == sorted(
        [resources.PODS.group_resource, resources.NAMESPACES.group_resource, resources.NODES.group_resource]
    )
    assert "gpu_utilization" in catalog.similar("gpu_utilisation")
