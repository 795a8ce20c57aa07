"""The adapter chart's README and the Helm part of docs/install.md stay true: the values table names every value of
values.yaml and nothing else, every key of prometheus-adapter's chart is in the mapping, and the values and commands
the guide gives install what it says."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from harness.deploy import adapter_chart, helm
from harness.deploy.adapter_chart import CHART
from harness.deploy.helm import CHARTS
from harness.deploy.manifests import ROOT
from harness.deploy.validation import K8S_VERSIONS, problems

README = (CHART / "README.md").read_text()
GUIDE = (ROOT / "docs" / "install.md").read_text()
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())


def section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def first_column(table_text: str) -> list[str]:
    """The backquoted names in the first cell of each table row."""
    cells = re.findall(r"^\| ([^|]+) \|", table_text, re.M)
    return [name for cell in cells for name in re.findall(r"`([^`]+)`", cell)]


def test_the_values_table_names_every_value_and_only_those() -> None:
    documented = set(first_column(section(README, "## Values")))
    paths = helm.key_paths(VALUES)
    assert documented - paths == set(), "the README documents values the chart does not have"
    for path in paths:
        # a documented value, a group of documented values, or a field inside one (resources.requests.cpu)
        covered = (
            path in documented
            or any(d.startswith(f"{path}.") for d in documented)
            or any(path.startswith(f"{d}.") for d in documented)
        )
        assert covered, f"the README's values table has no {path}"


def test_the_mapping_names_every_key_of_prometheus_adapters_chart() -> None:
    mapped = first_column(section(README, "## prometheus-adapter's values here"))
    for key in adapter_chart.PROMETHEUS_ADAPTER_KEYS:
        prefixes = [key.rsplit(".", n)[0] + ".*" for n in range(1, key.count(".") + 1)]
        assert key in mapped or any(p in mapped for p in prefixes), f"the mapping has no {key}"


def guide_command(release: str) -> list[str]:
    commands = re.findall(r"^helm upgrade --install (.+?)(?<!\\)$", GUIDE.replace("\\\n", " "), re.M)
    [command] = [c for c in commands if c.startswith(f"{release} ")]
    return shlex.split(command)


def test_the_guides_adapter_values_install_with_its_prometheus_and_release_label(tmp_path: Path) -> None:
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(# adapter-values.yaml\n.*?)```", GUIDE, re.S)]
    assert len(blocks) == 1
    (values := tmp_path / "adapter-values.yaml").write_text(yaml.safe_dump(blocks[0]))
    words = guide_command(adapter_chart.RELEASE)
    assert words[:2] == [adapter_chart.RELEASE, "charts/gpuscale-adapter"]
    assert words[words.index("--namespace") + 1] == "gpuscale"
    rendered = adapter_chart.template([values])
    view = adapter_chart.adapter_view(rendered)
    # the URL the kustomize part of the guide patches in
    assert view.settings.prometheus.url == "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
    assert view.container["image"] == "registry.example.com/gpuscale:0.1.0"
    [monitor] = rendered.all("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # the adapter's alerts, found by the same Prometheus
    [rule] = rendered.all("PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert {o["metadata"]["name"] for o in rendered.all("Service")} == {"gpuscale-adapter"}
    for version in K8S_VERSIONS:
        assert [p for obj in rendered.objects for p in problems(obj, version)] == []


def test_the_guide_installs_the_collector_from_its_chart() -> None:
    words = guide_command("gpuscale-collector")
    assert words[:2] == ["gpuscale-collector", "charts/gpuscale-collector"]
    # kube-prometheus-stack's release label, through dcgm-exporter's chart's key
    assert "serviceMonitor.additionalLabels.release=kube-prometheus-stack" in words
    # what those settings render: the objects kube-prometheus-stack's Prometheus and Grafana pick up
    settings = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
    rendered = helm.template(CHARTS / "gpuscale-collector", settings=settings, release="gpuscale-collector")
    for kind in ("ServiceMonitor", "PrometheusRule"):
        [found] = rendered.all(kind)
        assert found["metadata"]["labels"]["release"] == "kube-prometheus-stack", kind
    [dashboard] = [c for c in rendered.all("ConfigMap") if c["metadata"]["name"] == "gpuscale-grafana-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
