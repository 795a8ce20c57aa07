"""Both charts render a value as that value, whatever it holds: a string from values with a newline and a field after
it (``image.tag: "v1\\nhostile: injected"``) must stay one string in the field it was given for, never become a field
of its own. The schema does not refuse these (helm lint passed such a tag), so the templates must quote every scalar.
Rendered by the real Helm (scripts/ensure-helm)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.deploy import adapter_chart, collector_chart, helm
from harness.deploy.manifests import Obj, Rendered, container

HOSTILE = "v1\nhostile: injected"
# indented as the adapter's container fields are: unquoted, the line after the tag was one more of them
TAG = "v1\n          hostile: injected"


def keys(value: Any) -> set[str]:
    """Every mapping key anywhere in ``value``."""
    if isinstance(value, dict):
        return {str(k) for k in value} | {k for v in value.values() for k in keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys(v)}
    return set()


def strings(value: Any) -> list[str]:
    """Every string anywhere in ``value``: keys and values."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (str(k), *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def values_file(tmp_path: Path, values: dict[str, Any]) -> Path:
    path = tmp_path / "hostile.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def assert_not_injected(rendered: Rendered) -> None:
    for obj in rendered.objects:
        assert "hostile" not in keys(obj), f"a value became a field of {obj['kind']} {obj['metadata'].get('name')}"


# Every string of each chart's values that reaches an object and that the schema takes with a newline in it.
ADAPTER_VALUES: dict[str, Any] = {
    "image": {"repository": f"registry.example/{HOSTILE}", "tag": TAG},
    "priorityClassName": HOSTILE,
    "serviceAccount": {"name": HOSTILE},
    "service": {"clusterIP": HOSTILE},
    "networkPolicy": {"enabled": True, "prometheus": {"namespace": HOSTILE}, "keda": {"namespace": HOSTILE}},
    "serviceMonitor": {"enabled": True, "release": HOSTILE},
    "prometheusRule": {"enabled": True},
    "keda": {"enabled": True, "clientCASecret": HOSTILE},
    "podDisruptionBudget": {"enabled": True, "minAvailable": HOSTILE},
    "rules": {"existing": HOSTILE, "existingKey": HOSTILE},
}
COLLECTOR_VALUES: dict[str, Any] = {
    "image": {"repository": f"registry.example/{HOSTILE}", "tag": HOSTILE},
    "runtimeClassName": HOSTILE,
    "priorityClassName": HOSTILE,
    "serviceAccount": {"name": HOSTILE},
    "service": {"clusterIP": HOSTILE},
    "serviceMonitor": {"enabled": True, "apiVersion": HOSTILE},
    "kubePrometheusStack": {"release": HOSTILE},
    "grafanaDashboard": {"enabled": True, "namespace": HOSTILE},
    "prometheusRule": {"enabled": True},
}


def test_no_adapter_value_becomes_a_field_and_each_is_kept_verbatim(tmp_path: Path) -> None:
    """Before: image.tag's newline gave the adapter's container a field `hostile` (and helm lint passed)."""
    rendered = adapter_chart.template([values_file(tmp_path, ADAPTER_VALUES)])
    assert_not_injected(rendered)
    deployment = rendered.all("Deployment")[0]
    pod: Obj = deployment["spec"]["template"]["spec"]
    assert container(deployment, "adapter")["image"] == f"registry.example/{HOSTILE}:{TAG}"
    assert pod["priorityClassName"] == HOSTILE
    assert pod["serviceAccountName"] == HOSTILE
    assert rendered.all("Service")[0]["spec"]["clusterIP"] == HOSTILE
    assert rendered.all("PodDisruptionBudget")[0]["spec"]["minAvailable"] == HOSTILE
    peers = [p for rule in rendered.all("NetworkPolicy")[0]["spec"]["ingress"] for p in rule.get("from", [])]
    selected = [p["namespaceSelector"]["matchLabels"] for p in peers if "namespaceSelector" in p]
    assert {"kubernetes.io/metadata.name": HOSTILE} in selected


def test_no_collector_value_becomes_a_field_and_each_is_kept_verbatim(tmp_path: Path) -> None:
    """Before: serviceMonitor.apiVersion's newline gave the ServiceMonitor a top-level field `hostile`."""
    rendered = collector_chart.render([values_file(tmp_path, COLLECTOR_VALUES)])
    assert_not_injected(rendered)
    [monitor] = [o for o in rendered.objects if o["kind"] == "ServiceMonitor"]
    assert monitor["apiVersion"] == HOSTILE
    pod = collector_chart.daemonset(rendered)["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == HOSTILE
    assert pod["priorityClassName"] == HOSTILE
    assert pod["serviceAccountName"] == HOSTILE
    assert collector_chart.collector(rendered)["image"] == f"registry.example/{HOSTILE}:{HOSTILE}"
    assert rendered.all("Service")[0]["spec"]["clusterIP"] == HOSTILE
    [dashboard] = [o for o in rendered.objects if o["metadata"].get("labels", {}).get("grafana_dashboard")]
    assert dashboard["metadata"]["namespace"] == HOSTILE


@pytest.mark.parametrize("chart", [adapter_chart.CHART, collector_chart.CHART], ids=lambda c: c.name)
@pytest.mark.parametrize("override", ["nameOverride", "fullnameOverride", "namespaceOverride"])
def test_a_name_with_a_newline_stays_one_name(chart: Path, override: str, tmp_path: Path) -> None:
    """The names every object is called after come from values too, and reach many fields."""
    done = helm.template_done(chart, [values_file(tmp_path, {override: HOSTILE})])
    if done.returncode != 0:  # refused by name is as good as rendered verbatim
        assert override in done.stderr, done.stderr
        return
    rendered = Rendered(tuple(o for o in yaml.safe_load_all(done.stdout) if o), done.stderr)
    assert_not_injected(rendered)
    assert any(HOSTILE in s for o in rendered.objects for s in strings(o))
