"""The adapter chart's PrometheusRule: off unless prometheusRule.enabled, exactly the adapter's alerts of the shipped
rules file, labelled for kube-prometheus-stack as the chart's ServiceMonitor is, and scraped under the job those
alerts read whatever the release is called."""

from __future__ import annotations

import re

import pytest

from harness.deploy import adapter_chart
from harness.deploy.adapter_chart import CHART
from harness.deploy.manifests import NAMESPACE, ROOT, Obj, Rendered
from harness.deploy.prometheus_files import RULES, rule_groups
from harness.deploy.validation import K8S_VERSIONS, problems

ADAPTER_GROUPS = ("gpuscale.inference.recording", "gpuscale.adapter.alerts")
ON = ["prometheusRule.enabled=true"]


def prometheus_rule(rendered: Rendered) -> Obj:
    rules = rendered.all("PrometheusRule")
    assert len(rules) == 1, "the chart makes one PrometheusRule"
    return rules[0]


def test_the_charts_copy_of_the_rules_is_the_shipped_file() -> None:
    """Helm reads only files inside the chart: the copy must stay the file promtool unit-tests."""
    copy = CHART / "files" / "gpuscale-rules.yaml"
    assert copy.read_bytes() == RULES.read_bytes(), f"cp {RULES.relative_to(ROOT)} {copy.relative_to(ROOT)}"


def test_the_prometheus_rule_is_made_only_when_enabled() -> None:
    assert adapter_chart.template().all("PrometheusRule") == []
    # the ServiceMonitor alone does not bring the rule with it
    assert adapter_chart.template(settings=["serviceMonitor.enabled=true"]).all("PrometheusRule") == []
    rule = prometheus_rule(adapter_chart.template(settings=ON))
    assert rule["metadata"]["name"] == "gpuscale-adapter"
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["app.kubernetes.io/component"] == "adapter"


def test_the_prometheus_rule_holds_exactly_the_adapters_group_of_the_rules_file() -> None:
    expected = [g for g in rule_groups() if g["name"] in ADAPTER_GROUPS]
    assert [g["name"] for g in expected] == list(ADAPTER_GROUPS), f"{RULES.name} lacks one of {ADAPTER_GROUPS}"
    assert all(g["rules"] for g in expected), "an adapter group has no rules"
    rule = prometheus_rule(adapter_chart.template(settings=ON))
    assert rule["spec"]["groups"] == expected


def test_the_prometheus_rule_carries_the_service_monitors_release_label() -> None:
    """serviceMonitor.release labels both: kube-prometheus-stack selects rules by the same label as monitors."""
    for release, settings in [
        ("kube-prometheus-stack", []),
        ("prom", ["serviceMonitor.release=prom"]),
    ]:
        rendered = adapter_chart.template(settings=[*ON, "serviceMonitor.enabled=true", *settings])
        [monitor] = rendered.all("ServiceMonitor")
        assert monitor["metadata"]["labels"]["release"] == release
        assert prometheus_rule(rendered)["metadata"]["labels"]["release"] == release
    # without the ServiceMonitor the rule is still labelled
    alone = prometheus_rule(adapter_chart.template(settings=[*ON, "serviceMonitor.release=prom"]))
    assert alone["metadata"]["labels"]["release"] == "prom"


def test_an_empty_release_labels_neither_the_rule_nor_the_service_monitor() -> None:
    rendered = adapter_chart.template(settings=[*ON, "serviceMonitor.enabled=true", "serviceMonitor.release="])
    [monitor] = rendered.all("ServiceMonitor")
    assert "release" not in monitor["metadata"]["labels"]
    assert "release" not in prometheus_rule(rendered)["metadata"]["labels"]


def test_additional_labels_are_added_and_their_release_wins() -> None:
    rule = prometheus_rule(
        adapter_chart.template(
            settings=[*ON, "prometheusRule.additionalLabels.team=gpu", "prometheusRule.additionalLabels.release=other"]
        )
    )
    assert rule["metadata"]["labels"]["team"] == "gpu"
    assert rule["metadata"]["labels"]["release"] == "other"
    # the chart's own labels stay: the parity tests and `helm` find the rule by them
    assert rule["metadata"]["labels"]["app.kubernetes.io/name"] == "gpuscale-adapter"


def _alert_jobs(rule: Obj) -> set[str]:
    return {job for g in rule["spec"]["groups"] for r in g["rules"] for job in re.findall(r'job="([^"]+)"', r["expr"])}


@pytest.mark.parametrize("release", ["gpuscale-adapter", "metrics"])
def test_the_service_monitor_scrapes_the_adapter_as_the_job_the_alerts_read(release: str) -> None:
    """The Prometheus Operator names the job after the Service; another release name prefixes the Service's, so the
    ServiceMonitor sets the job back (else GPUScaleAdapterDown would fire for good)."""
    rendered = adapter_chart.template(settings=[*ON, "serviceMonitor.enabled=true"], release=release)
    assert _alert_jobs(prometheus_rule(rendered)) == {"gpuscale-adapter"}
    [monitor] = rendered.all("ServiceMonitor")
    [endpoint] = monitor["spec"]["endpoints"]
    [service] = rendered.all("Service")
    assert "jobLabel" not in monitor["spec"]
    job_relabels = [r for r in endpoint.get("relabelings", []) if r.get("targetLabel") == "job"]
    if service["metadata"]["name"] == "gpuscale-adapter":
        assert release == "gpuscale-adapter"
        assert job_relabels == []
    else:
        assert job_relabels == [{"targetLabel": "job", "replacement": "gpuscale-adapter"}]


def test_the_users_relabelings_follow_the_job_relabeling() -> None:
    rendered = adapter_chart.template(
        settings=[
            "serviceMonitor.enabled=true",
            "serviceMonitor.relabelings[0].action=labeldrop",
            "serviceMonitor.relabelings[0].regex=container",
        ],
        release="metrics",
    )
    [monitor] = rendered.all("ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["relabelings"] == [
        {"targetLabel": "job", "replacement": "gpuscale-adapter"},
        {"action": "labeldrop", "regex": "container"},
    ]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("release", ["gpuscale-adapter", "metrics"])
def test_the_prometheus_rule_and_service_monitor_validate(version: str, release: str) -> None:
    rendered = adapter_chart.template(
        settings=[*ON, "serviceMonitor.enabled=true", "prometheusRule.additionalLabels.team=gpu"], release=release
    )
    assert {"PrometheusRule", "ServiceMonitor"} <= {o["kind"] for o in rendered.objects}
    assert [p for obj in rendered.objects for p in problems(obj, version)] == []


WRONG = [
    (["prometheusRule.enabled=yes"], "/prometheusRule/enabled"),
    (["prometheusRule.additionalLabels.team=1"], "/prometheusRule/additionalLabels/team"),
    (["prometheusRule.labels.team=gpu"], "'labels'"),
    (["prometheusRule.release=prom"], "'release'"),
]


@pytest.mark.parametrize(("settings", "named"), WRONG, ids=[w[1] for w in WRONG])
def test_the_schema_refuses_a_wrong_prometheus_rule_value_by_name(settings: list[str], named: str) -> None:
    done = adapter_chart.template_done(settings=settings)
    assert done.returncode != 0
    assert named in done.stderr


def test_the_notes_name_the_rules_release_label_and_the_job_it_needs() -> None:
    with_monitor = adapter_chart.notes(settings=[*ON, "serviceMonitor.enabled=true", "serviceMonitor.release=prom"])
    assert "The PrometheusRule gpuscale-adapter (the adapter's alerts) is labelled release: prom;" in with_monitor
    assert "GPUScaleAdapterDown fires" not in with_monitor
    alone = adapter_chart.notes(settings=ON)
    assert "scrape the adapter under that job name" in alone
    assert "PrometheusRule" not in adapter_chart.notes()
