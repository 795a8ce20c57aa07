"""A relist's listings against each real store: rules that list one series name with different presence matchers
share one listing, and find what each would find alone."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator

import pytest

from adapter.backends.prometheus import PrometheusClient, PrometheusConfig, make_session
from adapter.config.rules import RuleSet, load_rules, parse_rules
from adapter.provider.relist import list_series
from adapter.self_metrics import AdapterMetrics
from harness.stores.exporter import FB, GPU
from harness.stores.kinds import on_every_store
from harness.stores.proxy import PrometheusProxy


@pytest.fixture
async def client(proxy: PrometheusProxy) -> AsyncIterator[PrometheusClient]:
    config = PrometheusConfig(url=proxy.url)
    c = PrometheusClient(make_session(config), config, AdapterMetrics())
    yield c
    await c.session.close()


def listings(proxy: PrometheusProxy) -> list[str]:
    return sorted(s.form["match[]"] for s in proxy.seen if s.path == "/api/v1/series")


async def each_alone(rules: RuleSet, client: PrometheusClient, start: float, end: float) -> list[object]:
    """What each rule finds in a relist of its own, where it shares nothing."""
    out: list[object] = []
    for rule in (*rules.rules, *rules.external_rules):
        alone = dataclasses.replace(rules, rules=(rule,), external_rules=())
        out.append((await list_series(alone, client, start, end)).custom[0])
    return out


@on_every_store
async def test_the_built_in_rules_list_each_field_once_and_find_what_each_rule_finds_alone(
    proxy: PrometheusProxy, client: PrometheusClient
) -> None:
    rules = load_rules(None)
    end = time.time()
    listed = await list_series(rules, client, end - 600, end)
    shared = listings(proxy)
    proxy.seen.clear()
    assert [*listed.custom, *listed.external] == await each_alone(rules, client, end - 600, end)
    # the five rules over each field (pod and exported_pod, node, namespace and exported_namespace) list it once,
    # from the GPU exporter's jobs only
    job = 'job=~"gpuscale-collector|(nvidia-)?dcgm-exporter"'
    assert f"{GPU}{{{job}}}" in shared
    assert f"{FB}{{{job}}}" in shared
    # (DCGM_FI_DEV_GPU_UTIL_RATIO, dcgm-exporter 4.9's name, is another field, listed once as well)
    assert not [m for m in shared if m.startswith(f"{GPU}{{") and m != f"{GPU}{{{job}}}"]
    assert [m for m in shared if m.startswith(f"{GPU}_RATIO{{")] == [f"{GPU}_RATIO{{{job}}}"]
    alone = listings(proxy)
    assert len([m for m in alone if m.startswith(f"{GPU}{{")]) == 5
    assert len(shared) < len(alone)
    # and the findings are not empty: pods from pod, nodes from Hostname, namespaces from both spellings
    gpu_pods = listed.custom[2][GPU]
    assert all("pod" in labels and "exported_pod" not in labels for labels in gpu_pods)
    assert listed.custom[3][GPU]
    assert all("exported_pod" in labels for labels in listed.custom[3][GPU])


@on_every_store
async def test_a_name_asked_one_way_or_with_other_matchers_is_listed_as_asked(
    proxy: PrometheusProxy, client: PrometheusClient
) -> None:
    rules = parse_rules(
        f"""
rules:
- seriesQuery: '{GPU}{{pod!=""}}'
- seriesQuery: '{FB}{{pod!="",namespace!=""}}'
- seriesQuery: '{GPU}{{Hostname=~"node-.*",pod=""}}'
- seriesQuery: '{{__name__=~"DCGM_FI_DEV_.*",namespace!=""}}'
- seriesQuery: '{GPU}{{Hostname=~"node-.*",pod!=""}}'
""",
        "cfg",
    )
    end = time.time()
    listed = await list_series(rules, client, end - 600, end)
    # GPU and FB asked one way each are listed as the rules ask; the regex rule's GPU and FB listings share
    # nothing with them, as their other matchers differ; the two rules that differ only in presence share
    assert f'{GPU}{{pod!=""}}' in listings(proxy)
    assert f'{GPU}{{Hostname=~"node-.*"}}' in listings(proxy)
    assert not [m for m in listings(proxy) if m.startswith(f"{GPU}{{Hostname")][1:]
    assert f"{GPU}{{}}" not in listings(proxy)
    assert f"{FB}{{}}" not in listings(proxy)
    proxy.seen.clear()
    assert list(listed.custom) == await each_alone(rules, client, end - 600, end)
    assert listed.custom[2][GPU]
    assert all("pod" not in labels for labels in listed.custom[2][GPU])
    assert listed.custom[4][GPU]
    assert all("pod" in labels for labels in listed.custom[4][GPU])
