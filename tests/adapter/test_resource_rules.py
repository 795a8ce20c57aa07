"""``resourceRules`` as prometheus-adapter reads them: the real configurations load, keys and types are checked, what a
rule cannot answer loads with a warning and fails the requests that need it, the window is a Go duration, and the
queries are the templates rendered with prometheus-adapter's arguments."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from adapter.config.resource_rules import go_duration
from adapter.config.rules import load_rules, parse_rules
from adapter.errors import ConfigError, NotConfigured, QueryError
from adapter.naming.resources import NODES, PODS
from adapter.provider.queries import node_resource_query, pod_resource_query

CONFIGS = Path(__file__).parent / "resource_configs"

SIMPLE = """
resourceRules:
  cpu:
    containerQuery: sum(rate(cpu{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)
    nodeQuery: sum(rate(node_cpu{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)
    resources:
      overrides:
        namespace: {resource: namespace}
        pod: {resource: pod}
        instance: {resource: node}
    containerLabel: container
  memory:
    containerQuery: <<range $i, $l := .GroupBySlice>><<$l>>;<<end>> <<index .LabelValuesByName "pod">>
    nodeQuery: sum(mem{<<.LabelMatchers>>}) by (<<.GroupBy>>)
    resources:
      template: <<.Resource>>
    containerLabel: name
  window: 1m30s
"""


def test_prometheus_adapter_and_kube_prometheus_configs_load() -> None:
    for name, node_label in (("prometheus-adapter", "node"), ("kube-prometheus", "instance")):
        rules = load_rules(CONFIGS / f"{name}.yaml").resource_rules
        assert rules is not None
        assert rules.window == "5m0s"
        assert rules.memory.label(NODES) == node_label
        assert (rules.cpu.label(PODS), rules.cpu.container_label) == ("pod", "container")


def test_a_file_without_resource_rules_has_none() -> None:
    assert parse_rules("rules: []", "cfg").resource_rules is None
    assert load_rules(None).resource_rules is None  # the built-in GPU rules serve no metrics.k8s.io


def test_queries_are_the_templates_with_prometheus_adapters_arguments() -> None:
    rules = parse_rules(SIMPLE, "cfg").resource_rules
    assert rules is not None
    assert pod_resource_query(rules.cpu, "ml", ["b-0", "a-0"]) == (
        'sum(rate(cpu{namespace="ml",pod=~"a-0|b-0"}[1m])) by (pod,container)'
    )
    assert (
        pod_resource_query(rules.cpu, "ml", ["a-0"])
        == 'sum(rate(cpu{namespace="ml",pod="a-0"}[1m])) by (pod,container)'
    )
    assert node_resource_query(rules.cpu, ["n1", "n2"]) == 'sum(rate(node_cpu{instance=~"n1|n2"}[1m])) by (instance)'
    # a template maps the labels named as the resources; GroupBySlice and LabelValuesByName are there too
    assert pod_resource_query(rules.memory, "ml", ["a-0", "b-0"]) == "pod;name; a-0|b-0"
    assert node_resource_query(rules.memory, ["n1"]) == 'sum(mem{node="n1"}) by (node)'


def test_values_are_escaped_in_matchers() -> None:
    rules = parse_rules(SIMPLE, "cfg").resource_rules
    assert rules is not None
    query = pod_resource_query(rules.cpu, 'x"y', ["a.b"])
    assert query == 'sum(rate(cpu{namespace="x\\"y",pod="a.b"}[1m])) by (pod,container)'
    assert pod_resource_query(rules.cpu, "ml", ["a.b", "c"]).count('pod=~"a\\\\.b|c"') == 1


@pytest.mark.parametrize(
    ("window", "shown"),
    [("0", "0s"), ("500ms", "500ms"), ("90s", "1m30s"), ("5m", "5m0s"), ("1h", "1h0m0s"), ("1d", "24h0m0s")],
)
def test_window_is_written_as_a_go_duration(window: str, shown: str) -> None:
    rules = parse_rules(SIMPLE.replace("window: 1m30s", f"window: {window!r}"), "cfg").resource_rules
    assert rules is not None
    assert rules.window == shown


def test_without_a_window_it_is_zero_as_in_prometheus_adapter() -> None:
    rules = parse_rules(SIMPLE.replace("  window: 1m30s\n", ""), "cfg").resource_rules
    assert rules is not None
    assert rules.window == "0s"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (0.001, "1ms"), (1, "1s"), (1.5, "1.5s"), (59.25, "59.25s"), (60, "1m0s"), (3661, "1h1m1s")],
)
def test_go_duration(seconds: float, shown: str) -> None:
    assert go_duration(seconds) == shown


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("window: 1m30s", "window: 90"), "resourceRules.window: expected a duration such as 5m, got int 90"),
        (("window: 1m30s", "window: five minutes"), "resourceRules.window: 'five minutes' is not a Prometheus"),
        (("containerLabel: name", "containerLabels: name"), "resourceRules.memory: unknown key 'containerLabels'"),
        (("cpu{<<.LabelMatchers>>}", "cpu{<<.Matchers>>}"), "resourceRules.cpu.containerQuery: can't evaluate field"),
        (("  window: 1m30s", "  storage: {}"), "resourceRules: unknown key 'storage'"),
        (
            ("containerLabel: container", "containerLabel: [container]"),
            "resourceRules.cpu.containerLabel: expected a string",
        ),
        (("template: <<.Resource>>", "template: <<.Kind>>"), "resourceRules.memory.resources.template"),
    ],
)
def test_mistakes_name_the_key(change: tuple[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rules(SIMPLE.replace(*change), "cfg")
    assert message in str(caught.value)


def test_what_a_rule_cannot_answer_loads_with_a_warning_and_fails_those_requests(
    caplog: pytest.LogCaptureFixture,
) -> None:
    partial = SIMPLE.replace("        pod: {resource: pod}\n", "").replace(
        "containerQuery: sum(rate(cpu{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)", "containerQuery: ''"
    )
    with caplog.at_level(logging.WARNING):
        rules = parse_rules(partial, "cfg").resource_rules
    assert rules is not None
    warned = [r.getMessage() for r in caplog.records]
    assert "cfg: resourceRules.cpu.containerQuery is empty: every request that needs it fails" in warned
    assert "cfg: resourceRules.cpu.resources maps no label to pods" in warned
    with pytest.raises(NotConfigured, match=r"resourceRules\.cpu\.resources maps no label to pods"):
        pod_resource_query(rules.cpu, "ml", ["a-0"])
    # what the rule can answer still works
    assert node_resource_query(rules.cpu, ["n1"]) == 'sum(rate(node_cpu{instance="n1"}[1m])) by (instance)'


def test_an_empty_query_fails_the_request_that_renders_it() -> None:
    rules = parse_rules(
        SIMPLE.replace("nodeQuery: sum(mem{<<.LabelMatchers>>}) by (<<.GroupBy>>)", "nodeQuery: ''"), "c"
    )
    assert rules.resource_rules is not None
    with pytest.raises(QueryError, match=r"resourceRules\.memory\.nodeQuery produced an empty query"):
        node_resource_query(rules.resource_rules.memory, ["n1"])
