"""charts/gpuscale-collector against manifests/: with default values it renders the collector objects of the kustomize
base, with its switches on the collector's part of each overlay, from the same rules, dashboard and counters files;
it lints, packages, and every object it renders for any example values file validates."""

from __future__ import annotations

import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from harness.deploy import adapter_chart
from harness.deploy.collector_chart import (
    CHART,
    EXAMPLES,
    by_kind_and_name,
    render,
    without_helm_labels,
)
from harness.deploy.helm import HELM_LABELS, lint, package
from harness.deploy.manifests import BASE, MANIFESTS, ROOT, Obj, Rendered
from harness.deploy.manifests import render as kustomize
from harness.deploy.prometheus_files import RULES, rule_groups
from harness.deploy.validation import K8S_VERSIONS, problems

# Each overlay's collector part and the values that turn it on in the chart. kube-prometheus-stack's release label
# is a chart value with a default the kustomize component leaves to the user's own labels (docs/install.md).
OVERLAYS = {
    "base": (BASE, []),
    "shared-gpus": (MANIFESTS / "overlays" / "shared-gpus", ["sharedGpus.enabled=true"]),
    "network-policy": (MANIFESTS / "overlays" / "network-policy", ["networkPolicy.enabled=true"]),
    "prometheus-operator": (
        MANIFESTS / "overlays" / "prometheus-operator",
        [
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "grafanaDashboard.enabled=true",
            "kubePrometheusStack.release=",
        ],
    ),
}
# The kustomize PrometheusRule holds the adapter's alerts too; the collector's chart ships the groups that need only
# the collector's series (an adapter that is not installed would fire GPUScaleAdapterDown for good), and the adapter's
# chart ships the adapter's (its prometheusRule).
ADAPTER_GROUPS = {"gpuscale.inference.recording", "gpuscale.adapter.alerts"}
COPIES = {
    "files/gpuscale-rules.yaml": RULES,
    "files/gpuscale-gpus.json": MANIFESTS / "dashboards" / "gpuscale-gpus.json",
    "files/default-counters.csv": ROOT / "collector" / "counters" / "default-counters.csv",
}


def collector_part(rendered: Rendered) -> dict[tuple[str, str], Obj]:
    """What of a kustomization the collector's chart renders: the collector's objects and the Grafana dashboard
    (the namespace and the adapter's objects belong to the cluster and the adapter's chart)."""
    return {
        key: obj
        for key, obj in by_kind_and_name(rendered).items()
        if obj["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "collector"
        or key == ("ConfigMap", "gpuscale-grafana-dashboard")
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_chart_renders_what_the_kustomization_renders(overlay: str) -> None:
    directory, settings = OVERLAYS[overlay]
    expected = collector_part(kustomize(directory))
    chart = by_kind_and_name(render(settings=settings))
    chart_rule = chart.pop(("PrometheusRule", "gpuscale-collector"), None)
    assert (chart_rule is not None) == (overlay == "prometheus-operator")
    assert sorted(chart) == sorted(expected)
    for key, obj in chart.items():
        assert without_helm_labels(obj) == expected[key], f"{key} differs from manifests/ ({overlay})"


def test_the_chart_labels_its_objects_as_helm_does() -> None:
    """The labels the comparison leaves out are on every object (so leaving them out is not hiding a typo)."""
    for obj in render().objects:
        assert obj["metadata"]["labels"].keys() >= HELM_LABELS, obj["metadata"]["name"]


def test_the_comparison_sees_a_difference() -> None:
    expected = collector_part(kustomize(BASE))
    chart = by_kind_and_name(render(settings=["resources.limits.memory=512Mi"]))
    key = ("DaemonSet", "gpuscale-collector")
    assert without_helm_labels(chart[key]) != expected[key]


def test_the_prometheus_rule_has_the_collectors_groups_of_the_shipped_rules() -> None:
    rule = render(settings=["prometheusRule.enabled=true"]).one("PrometheusRule", "gpuscale-collector")
    kustomized = kustomize(MANIFESTS / "overlays" / "prometheus-operator").one("PrometheusRule", "gpuscale")
    names = {g["name"] for g in rule_groups()}
    shipped = [g for g in rule_groups() if g["name"] not in ADAPTER_GROUPS]
    # a new group in gpuscale-rules.yaml must be given to one chart or the other, and to one only: the adapter's
    # chart renders ADAPTER_GROUPS (tests/deploy/test_adapter_chart_parity.py checks the two charts' order)
    adapters = adapter_chart.template(settings=["prometheusRule.enabled=true"]).one(
        "PrometheusRule", "gpuscale-adapter"
    )
    assert {g["name"] for g in adapters["spec"]["groups"]} == ADAPTER_GROUPS
    assert names == {g["name"] for g in rule["spec"]["groups"]} | ADAPTER_GROUPS
    assert rule["spec"]["groups"] == shipped
    assert [g for g in kustomized["spec"]["groups"] if g["name"] not in ADAPTER_GROUPS] == shipped


@pytest.mark.parametrize("copy", COPIES)
def test_the_charts_files_are_the_repositorys(copy: str) -> None:
    """Helm reads only files inside the chart: these copies must stay the files manifests/ and the collector use."""
    assert (CHART / copy).read_bytes() == COPIES[copy].read_bytes(), f"cp {COPIES[copy].relative_to(ROOT)} {copy}"


def test_the_counters_configmap_without_custom_metrics_holds_the_built_in_file() -> None:
    configmap = render(
        settings=[
            "extraConfigMapVolumes[0].name=v",
            "extraConfigMapVolumes[0].configMap.name=exporter-metrics-config-map",
        ]
    ).one("ConfigMap", "exporter-metrics-config-map")
    assert configmap["data"]["metrics"] == COPIES["files/default-counters.csv"].read_text()


def test_the_chart_and_image_versions_are_the_projects() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["apiVersion"] == "v2"  # Helm 3 and 4
    assert chart["appVersion"] == version
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    daemonset = render().one("DaemonSet", "gpuscale-collector")
    image = daemonset["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"{values['image']['repository']}:{version}"
    # the helper that replaces dcgm-exporter's image falls back to the same repository
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert f'define "gpuscale-collector.defaultRepository" -}}}}{values["image"]["repository"]}{{{{' in helpers


@pytest.mark.parametrize("values", [None, *EXAMPLES], ids=lambda p: p.name if p else "defaults")
def test_helm_lint_strict_passes(values: Path | None) -> None:
    done = lint(CHART, [values] if values else [])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout
    assert "[ERROR]" not in done.stdout


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("values", [None, *EXAMPLES], ids=lambda p: p.name if p else "defaults")
def test_every_rendered_object_validates(values: Path | None, version: str) -> None:
    rendered = render([values] if values else [])
    assert rendered.objects
    assert [p for obj in rendered.objects for p in problems(obj, version)] == []


def test_every_switch_on_validates() -> None:
    everything = [*OVERLAYS["prometheus-operator"][1][:3], "sharedGpus.enabled=true", "networkPolicy.enabled=true"]
    rendered = render(settings=everything)
    assert {o["kind"] for o in rendered.objects} >= {"ServiceMonitor", "PrometheusRule", "NetworkPolicy"}
    for version in K8S_VERSIONS:
        assert [p for obj in rendered.objects for p in problems(obj, version)] == []


def test_helm_package_makes_an_archive_with_the_examples_the_readme_links(tmp_path: Path) -> None:
    done = package(CHART, tmp_path)
    assert done.returncode == 0, done.stderr
    [archive] = tmp_path.glob("gpuscale-collector-*.tgz")
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert "gpuscale-collector/values.schema.json" in names
    assert set(f"gpuscale-collector/{c}" for c in COPIES) <= names
    assert {f"gpuscale-collector/{p.relative_to(CHART)}" for p in (CHART / "examples").glob("*.yaml")} <= names
