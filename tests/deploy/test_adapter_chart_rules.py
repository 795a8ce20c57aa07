"""The rules file the chart gives the adapter: the adapter's own rules parser reads it, and it holds exactly the rules
of the values (rules.custom, rules.external, rules.resource), after the built-in ones and prometheus-adapter's
default ones when they are asked for; rules.existing makes the adapter read the user's ConfigMap instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.config import rules as rules_module
from adapter.config.rules import default_rules_text, parse_rules
from harness.deploy import adapter_chart
from harness.deploy.adapter_chart import CHART, EXAMPLES

BUILT_IN = yaml.safe_load(default_rules_text())
PROMETHEUS_ADAPTER_DEFAULT = yaml.safe_load((CHART / "files" / "prometheus-adapter-rules.yaml").read_text())["rules"]
EXAMPLE_VALUES = {p.stem: yaml.safe_load(p.read_text()) for p in EXAMPLES}
CHART_DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())["rules"]


def expected_rules(rules: dict[str, Any]) -> dict[str, Any]:
    """What the rules file must hold for ``rules`` (the values' rules, over the chart's defaults), in the adapter's
    order: built-in, prometheus-adapter's defaults, custom; built-in external, external; resource."""
    rules = {**CHART_DEFAULTS, **rules}
    expected: dict[str, Any] = {
        "rules": (BUILT_IN["rules"] if rules["builtin"] else [])
        + (PROMETHEUS_ADAPTER_DEFAULT if rules["default"] else [])
        + (rules["custom"] or [])
    }
    external = (BUILT_IN["externalRules"] if rules["builtin"] else []) + (rules["external"] or [])
    if external:
        expected["externalRules"] = external
    if rules["resource"]:
        expected["resourceRules"] = rules["resource"]
    return expected


CASES = {
    **{name: v.get("rules", {}) for name, v in EXAMPLE_VALUES.items() if not v.get("rules", {}).get("existing")},
    "defaults": {},
    "only-prometheus-adapters": {"builtin": False, "default": True},
    "no-rules-at-all": {"builtin": False},
    "external-only": {"builtin": False, "external": EXAMPLE_VALUES["prometheus-adapter"]["rules"]["external"]},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rules_file_holds_exactly_the_rules_asked(case: str, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"rules": CASES[case]}))
    text = adapter_chart.rules_text(adapter_chart.template([values]))
    assert yaml.safe_load(text) == expected_rules(CASES[case])
    parsed = parse_rules(text, "rules.yaml")  # the adapter's own strict loader: every key known, every regex valid
    expected = expected_rules(CASES[case])
    assert len(parsed.rules) == len(expected["rules"])
    assert len(parsed.external_rules) == len(expected.get("externalRules", []))
    assert (parsed.resource_rules is not None) == ("resourceRules" in expected)


def test_custom_rules_come_after_the_built_in_ones_and_keep_the_files_comments(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"rules": EXAMPLE_VALUES["prometheus-adapter-minimal"]["rules"]}))
    text = adapter_chart.rules_text(adapter_chart.template([values]))
    built_in = default_rules_text()
    # the built-in file's text is all there, the custom rule inserted before the comment that opens externalRules
    head, _, tail = built_in.partition("\n\n# External metrics")
    assert text.startswith(head)
    assert text.endswith("# External metrics" + tail)
    assert "queue_depth" in text[len(head) : len(text) - len(tail)]


# series names and what prometheus-adapter's default rules serve them as (the rule's index and the metric's name)
SERIES = [
    ("container_cpu_usage_seconds_total", 0, "cpu_usage"),
    ("container_network_receive_bytes_total", 1, "network_receive_bytes"),
    ("container_memory_working_set_bytes", 2, "memory_working_set_bytes"),
    ("kube_deployment_status_replicas", 3, "kube_deployment_status_replicas"),
    ("http_requests_total", 4, "http_requests"),
    ("process_cpu_seconds_total", 5, "process_cpu"),
]


@pytest.mark.parametrize(("series", "index", "name"), SERIES, ids=[s[0] for s in SERIES])
def test_prometheus_adapters_default_rules_serve_each_series_once(series: str, index: int, name: str) -> None:
    rules = parse_rules(yaml.safe_dump({"rules": PROMETHEUS_ADAPTER_DEFAULT}), "default").rules
    assert len(rules) == 6
    container = series.startswith("container_")
    # the cAdvisor rules (0-2) list container_* series, the others (3-5) every other series with a namespace
    candidates = [i for i in range(6) if (i < 3) == container]
    accepting = [i for i in candidates if rules[i].accepts(series)]
    assert accepting == [index]
    assert rules[index].api_name(series) == name


def test_rules_existing_is_read_from_its_own_configmap() -> None:
    values = EXAMPLE_VALUES["prometheus-adapter-existing-rules"]
    rendered = adapter_chart.template([CHART / "examples" / "prometheus-adapter-existing-rules.yaml"])
    view = adapter_chart.adapter_view(rendered)
    assert view.rules_configmap == values["rules"]["existing"]
    assert view.rules_key == "config.yaml"  # prometheus-adapter's chart's key
    assert rendered.all("ConfigMap") == []


def test_a_change_of_rules_renames_the_configmap_so_the_pods_roll(tmp_path: Path) -> None:
    first = adapter_chart.adapter_view(adapter_chart.template()).rules_configmap
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"rules": EXAMPLE_VALUES["prometheus-adapter-minimal"]["rules"]}))
    second = adapter_chart.adapter_view(adapter_chart.template([values])).rules_configmap
    assert first != second
    assert first.rsplit("-", 1)[0] == second.rsplit("-", 1)[0] == "gpuscale-adapter-rules"


def test_the_schema_takes_the_rule_keys_the_adapter_takes() -> None:
    definitions = json.loads((CHART / "values.schema.json").read_text())["definitions"]
    assert set(definitions["rule"]["properties"]) == rules_module._RULE_KEYS
    assert set(definitions["ruleResources"]["properties"]) == rules_module._RESOURCES_KEYS
    assert set(definitions["resourceRule"]["properties"]) == rules_module._RESOURCE_RULE_KEYS
    resource = json.loads((CHART / "values.schema.json").read_text())["properties"]["rules"]["properties"]["resource"]
    assert set(resource["properties"]) == rules_module._RESOURCE_RULES_KEYS


@pytest.mark.parametrize("jobs", ["my-dcgm|node-gpus", 'gpu\'s "exporter"\\.x'])
def test_gpu_exporter_jobs_reach_every_built_in_gpu_rule_as_given(jobs: str, tmp_path: Path) -> None:
    """rules.gpuExporterJobs replaces the job matcher of every rule over a GPU exporter's labels (seriesQuery and
    metricsQuery), and the adapter's own parser reads back the regular expression given, quotes and all."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"rules": {"gpuExporterJobs": jobs}}))
    parsed = parse_rules(adapter_chart.rules_text(adapter_chart.template([values])), "rules.yaml")
    gpu = [r for r in (*parsed.rules, *parsed.external_rules) if str(r.series_query).startswith("DCGM_FI_")]
    # six metrics: both label spellings and nodes; external: both label spellings; each for dcgm-exporter 4.8's
    # series name and 4.9's (DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_GPU_UTIL_RATIO ...)
    assert len(gpu) == 2 * (6 * 3 + 6 * 2)
    default = yaml.safe_load(default_rules_text())
    assert len([r for r in (*default["rules"], *default["externalRules"]) if "job=~" in r["seriesQuery"]]) == len(gpu)
    for rule in gpu:
        assert ("job", "=~", jobs) in rule.series_query.matchers, rule.series_query
        assert f"job=~{json.dumps(jobs)}" in rule.metrics_query.text, rule.where
