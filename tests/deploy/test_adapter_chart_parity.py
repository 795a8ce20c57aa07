"""One source of truth for the adapter's objects: the chart with default values renders what the kustomize base
renders, and with each overlay's value on, what that overlay renders (kustomize with a real kubectl, Helm with a
real helm). Only Helm's standard labels and the rules ConfigMap's hash suffix may differ (``comparable`` says why)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.deploy import adapter_chart, collector_chart
from harness.deploy.manifests import BASE, MANIFESTS, ROOT, Obj, Rendered, render

OVERLAYS = MANIFESTS / "overlays"
RESOURCE_RULES = yaml.safe_load((MANIFESTS / "components" / "resource-metrics" / "adapter-rules.yaml").read_text())[
    "resourceRules"
]


def values_file(tmp_path: Path, values: dict[str, object]) -> Path:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def comparable(objects: dict[tuple[str, str], Obj]) -> dict[tuple[str, str], Obj]:
    out = [adapter_chart.comparable(o) for o in objects.values()]
    return {(o["kind"], o["metadata"]["name"]): o for o in out}


def assert_same_objects(kustomized: Rendered, helmed: Rendered, parse_rules: bool = False) -> None:
    expected = comparable(adapter_chart.adapter_objects(kustomized))
    # every object of the chart is the adapter's: the collector and the namespace are not its to make
    assert len(adapter_chart.adapter_objects(helmed)) == len(helmed.objects)
    got = comparable(adapter_chart.adapter_objects(helmed))
    assert sorted(got) == sorted(expected)
    if parse_rules:
        # The overlay's rules file is the base's text with resourceRules appended under a comment of its own; the
        # chart writes rules.resource from the values, without that comment. The rules are compared, not the text.
        for objects in (got, expected):
            for obj in objects.values():
                if obj["kind"] == "ConfigMap":
                    obj["data"] = {k: yaml.safe_load(v) for k, v in obj["data"].items()}
    for key in expected:
        assert got[key] == expected[key], key


def test_default_values_render_the_kustomize_base() -> None:
    assert_same_objects(render(BASE), adapter_chart.template())


def test_the_default_rules_file_is_the_built_in_rules_byte_for_byte() -> None:
    text = adapter_chart.rules_text(adapter_chart.template())
    assert text == (ROOT / "adapter" / "default-rules.yaml").read_text()
    assert (adapter_chart.CHART / "files" / "default-rules.yaml").read_bytes() == (
        ROOT / "adapter" / "default-rules.yaml"
    ).read_bytes(), "charts/gpuscale-adapter/files/default-rules.yaml must be a copy of adapter/default-rules.yaml"


def test_the_service_monitor_is_the_prometheus_operator_overlays() -> None:
    # the overlay leaves kube-prometheus-stack's release label to the user's kustomization (docs/install.md)
    helmed = adapter_chart.template(settings=["serviceMonitor.enabled=true", "serviceMonitor.release="])
    assert_same_objects(render(OVERLAYS / "prometheus-operator"), helmed)


def test_with_the_prometheus_rule_the_rest_is_still_the_prometheus_operator_overlays() -> None:
    settings = ["serviceMonitor.enabled=true", "serviceMonitor.release=", "prometheusRule.enabled=true"]
    helmed = adapter_chart.template(settings=settings)
    # The overlay's one PrometheusRule holds every group, collector's and adapter's, and is labelled as neither
    # component; each chart ships its own part of it (checked below), so the adapter chart's is set aside here.
    rule = helmed.one("PrometheusRule", "gpuscale-adapter")
    rest = Rendered(tuple(o for o in helmed.objects if o is not rule), helmed.stderr)
    assert_same_objects(render(OVERLAYS / "prometheus-operator"), rest)


def test_the_two_charts_prometheus_rules_split_the_overlays_groups_between_them() -> None:
    """Installed together with prometheusRule.enabled, the collector's chart and the adapter's load every group of
    the overlay's PrometheusRule, once each and in the same order: none is lost or loaded twice."""
    [overlay_rule] = render(OVERLAYS / "prometheus-operator").all("PrometheusRule")
    [collectors] = collector_chart.render(settings=["prometheusRule.enabled=true"]).all("PrometheusRule")
    [adapters] = adapter_chart.template(settings=["prometheusRule.enabled=true"]).all("PrometheusRule")
    collector_names = {g["name"] for g in collectors["spec"]["groups"]}
    adapter_names = {g["name"] for g in adapters["spec"]["groups"]}
    assert collector_names
    assert adapter_names
    assert collector_names.isdisjoint(adapter_names)
    assert collectors["spec"]["groups"] + adapters["spec"]["groups"] == overlay_rule["spec"]["groups"]


def test_rules_resource_renders_the_resource_metrics_overlay(tmp_path: Path) -> None:
    helmed = adapter_chart.template([values_file(tmp_path, {"rules": {"resource": RESOURCE_RULES}})])
    assert_same_objects(render(OVERLAYS / "resource-metrics"), helmed, parse_rules=True)


def test_keda_renders_the_keda_overlay() -> None:
    assert_same_objects(render(OVERLAYS / "keda"), adapter_chart.template(settings=["keda.enabled=true"]))


def test_network_policy_renders_the_network_policy_overlay() -> None:
    helmed = adapter_chart.template(settings=["networkPolicy.enabled=true"])
    assert_same_objects(render(OVERLAYS / "network-policy"), helmed)


def _service_monitor(rendered: Rendered) -> Obj:
    monitors = rendered.all("ServiceMonitor")
    assert len(monitors) == 1
    return monitors[0]


def test_the_service_monitor_carries_kube_prometheus_stacks_release_label() -> None:
    default = _service_monitor(adapter_chart.template(settings=["serviceMonitor.enabled=true"]))
    assert default["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    mine = _service_monitor(
        adapter_chart.template(settings=["serviceMonitor.enabled=true", "serviceMonitor.release=prom"])
    )
    assert mine["metadata"]["labels"]["release"] == "prom"
    assert "ServiceMonitor" not in {o["kind"] for o in adapter_chart.template().objects}


@pytest.mark.parametrize(
    ("release", "prefix"), [("gpuscale-adapter", "gpuscale"), ("metrics", "metrics-gpuscale")], ids=["docs", "other"]
)
def test_a_release_name_prefixes_every_cluster_wide_name(release: str, prefix: str) -> None:
    rendered = adapter_chart.template(release=release)
    cluster_wide = {o["metadata"]["name"] for o in rendered.objects if o["kind"].startswith("Cluster")}
    assert cluster_wide == {
        f"{prefix}-adapter-reader",
        f"{prefix}-adapter:system:auth-delegator",
        f"{prefix}-metrics-reader",
        f"{prefix}-hpa-metrics-reader",
    }
