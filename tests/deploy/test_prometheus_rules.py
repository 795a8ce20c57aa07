"""The alerting and recording rules and the scrape configuration, checked by a real promtool: the rules load, their
unit tests pass and cover every alert both firing and not firing, and the PrometheusRule carries the same groups."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.deploy.manifests import BASE, MANIFESTS, NAMESPACE, containers, render
from harness.deploy.prometheus_files import (
    RULE_TESTS,
    RULES,
    offline_scrape_config,
    promtool,
    rule_groups,
    rules,
    scrape_jobs,
)


def alerts() -> list[dict[str, Any]]:
    return [r for r in rules() if "alert" in r]


def test_promtool_checks_the_rules() -> None:
    done = promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_runs_the_rule_unit_tests() -> None:
    done = promtool("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_unit_tests_can_fail(tmp_path: Path) -> None:
    """The same tests against rules whose temperature threshold moved: promtool must report it."""
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    text = RULES.read_text()
    threshold = "DCGM_FI_DEV_GPU_TEMP_CELSIUS) > 85"  # either spelling, dcgm-exporter 4.8's or 4.9's
    assert threshold in text
    (tmp_path / RULES.name).write_text(text.replace(threshold, threshold.replace("85", "95")))
    done = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert done.returncode != 0
    assert "GPUTemperatureHigh" in done.stdout + done.stderr


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {a["alert"] for a in alerts()}
    assert names - firing == set(), "alerts never shown firing"
    assert names - quiet == set(), "alerts never shown staying quiet"


def test_every_recording_rule_is_tested() -> None:
    tested = {
        t["expr"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"] for t in case.get("promql_expr_test", [])
    }
    recorded = {r["record"] for r in rules() if "record" in r}
    assert recorded - tested == set()


def test_alerts_carry_a_severity_and_say_what_and_why() -> None:
    for alert in alerts():
        assert alert["labels"]["severity"] in ("warning", "critical"), alert["alert"]
        assert set(alert["annotations"]) == {"summary", "description"}, alert["alert"]


def test_the_prometheusrule_carries_the_same_groups() -> None:
    rule = render(MANIFESTS / "overlays" / "prometheus-operator").one("PrometheusRule", "gpuscale")
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["spec"]["groups"] == rule_groups(), (
        "components/prometheus-operator/prometheusrule.yaml differs from prometheus/gpuscale-rules.yaml"
    )


def test_promtool_checks_the_scrape_config(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    config = offline_scrape_config(
        {"gpuscale-collector": [{"targets": ["10.0.0.1:9400"]}], "gpuscale-adapter": [{"targets": ["10.0.0.2:6443"]}]}
    )
    for job in config["scrape_configs"]:
        if "authorization" in job:  # promtool checks that the file exists
            job["authorization"]["credentials_file"] = str(token)
    config["rule_files"] = [str(RULES)]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    done = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("job", "container"), [("gpuscale-collector", "collector"), ("gpuscale-adapter", "adapter")])
def test_scrape_jobs_keep_the_pods_and_ports_the_manifests_make(job: str, container: str) -> None:
    """The keep rule's regex matches the rendered pod label and port name (Kubernetes discovery's meta labels)."""
    [config] = [j for j in scrape_jobs() if j["job_name"] == job]
    [keep] = [r for r in config["relabel_configs"] if r.get("action") == "keep"]
    assert keep["source_labels"] == [
        "__meta_kubernetes_pod_label_app_kubernetes_io_name",
        "__meta_kubernetes_pod_container_port_name",
    ]
    rendered = render(BASE)
    workloads = [*rendered.all("Deployment"), *rendered.all("DaemonSet")]
    values = [
        f"{w['spec']['template']['metadata']['labels']['app.kubernetes.io/name']};{p['name']}"
        for w in workloads
        for c in containers(w)
        if c["name"] == container
        for p in c["ports"]
    ]
    assert values
    assert all(re.fullmatch(keep["regex"], v) for v in values)
    others = [v for w in workloads for c in containers(w) if c["name"] != container for v in [f"x;{c['name']}"]]
    assert not any(re.fullmatch(keep["regex"], v) for v in others)


def test_the_collector_job_keeps_the_collectors_pod_labels() -> None:
    [config] = [j for j in scrape_jobs() if j["job_name"] == "gpuscale-collector"]
    assert config["honor_labels"] is True
    # the alerts watch gpuscale's own jobs, by the names the scrape config gives them (the engines' job is the users')
    alerted = set(re.findall(r'job="([^"]+)"', RULES.read_text()))
    assert alerted == {"gpuscale-collector", "gpuscale-adapter"}
    assert alerted <= {j["job_name"] for j in scrape_jobs()}


def test_the_inference_job_keeps_the_pods_labelled_as_engines_and_labels_them_as_the_rules_read_them() -> None:
    [config] = [j for j in scrape_jobs() if j["job_name"] == "gpuscale-inference-engines"]
    [keep] = [r for r in config["relabel_configs"] if r.get("action") == "keep"]
    assert keep["source_labels"] == [
        "__meta_kubernetes_pod_label_gpuscale_io_inference_engine",
        "__meta_kubernetes_pod_container_port_name",
    ]
    template = render(MANIFESTS / "examples" / "inference-hpa").one("Deployment", "chat")["spec"]["template"]
    label = template["metadata"]["labels"]["gpuscale.io/inference-engine"]
    ports = [p["name"] for c in template["spec"]["containers"] for p in c["ports"]]
    assert any(re.fullmatch(keep["regex"], f"{label};{port}") for port in ports)
    assert not re.fullmatch(keep["regex"], ";metrics")  # a pod without the label
    targets = {r["target_label"] for r in config["relabel_configs"] if "target_label" in r}
    assert targets == {"namespace", "pod", "node"}  # what the inference rules' overrides read
    assert config["honor_labels"] is False  # the engines' own labels never name a pod: kept as exported_*


def test_only_the_collectors_monitor_keeps_the_pages_labels() -> None:
    """The engines are tenants' pods: their PodMonitor, like the scrape job, keeps the labels it sets and renames a
    page's own; the collector's ServiceMonitor alone honours the page's pod/namespace, under the job the GPU rules
    read (its Service's name)."""
    rendered = render(MANIFESTS / "overlays" / "prometheus-operator")
    [engines] = rendered.one("PodMonitor", "gpuscale-inference-engines")["spec"]["podMetricsEndpoints"]
    assert engines["honorLabels"] is False
    collector = rendered.one("ServiceMonitor", "gpuscale-collector")
    assert [e["honorLabels"] for e in collector["spec"]["endpoints"]] == [True]
    assert collector["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    selected = collector["spec"]["selector"]["matchLabels"]
    [service] = [s for s in rendered.all("Service") if s["metadata"].get("labels", {}).items() >= selected.items()]
    assert service["metadata"]["name"] == "gpuscale-collector"  # the job the built-in GPU rules read
    for rule in rules():
        if "DCGM_FI_" in rule.get("expr", "") and "record" in rule:
            assert 'job=~"gpuscale-collector|(nvidia-)?dcgm-exporter"' in rule["expr"], rule["record"]
