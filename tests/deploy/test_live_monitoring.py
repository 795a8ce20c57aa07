"""The dashboard and the rules against a real Prometheus that scrapes the real collector (simulated GPUs, pods on
them, one GPU shared) through the shipped scrape job, and again through a job like dcgm-exporter's ServiceMonitor
(the collector's pod labels renamed exported_*): every panel query returns data with the labels its legend names,
every rule evaluates, the recording rules produce series, no GPU or collector alert is pending on a healthy
collector, and every metric and label the rules and panels name exists."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from adapter.self_metrics import AdapterMetrics
from collector.self_metrics import SelfStats, self_families
from demo.node import INFER, TRAINERS
from demo.prometheus import Prometheus
from tests.deploy.live import COLLECTOR_POD, NAMESPACE, NODE, live_monitoring
from tests.deploy.prometheus_files import rules
from tests.deploy.promql_names import (
    Query,
    dashboard,
    legend_labels,
    metric_uses,
    queries,
    substitute,
    variable_query,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]
QUERIES = queries(dashboard())
# A recording rule whose input only exists after a fault the simulated GPUs do not make (an XID); promtool's unit
# tests show it working.
NEEDS_A_FAULT = {"gpu:dcgm_xid_errors:last"}
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"job", "instance"}
SUFFIXES = {"counter": ["_total"], "histogram": ["_count", "_sum", "_bucket"], "gauge": [""]}
# What a scrape without honor_labels names the collector's pod labels; with honor_labels no series has them.
RENAMED = {"exported_pod", "exported_namespace"}


@pytest.fixture(scope="module", params=["honor_labels", "renamed"])
def style(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory, style: str) -> Iterator[Prometheus]:
    with live_monitoring(tmp_path_factory.mktemp("live"), renamed=style == "renamed") as prom:
        # pod-labelled series of every pod, including the two sharing a GPU (their shares need the pod directory)
        prom.wait_for('count(DCGM_FI_DEV_GPU_UTIL{pod!=""})', timeout=90)
        pod_label = "exported_pod" if style == "renamed" else "pod"
        for pod in (*TRAINERS, *INFER):
            prom.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{{pod_label}="{pod}"}}', timeout=60)
        prom.wait_for("kube_horizontalpodautoscaler_status_current_replicas")
        yield prom


def wait_for_data(prometheus: Prometheus, expr: str, timeout: float = 30) -> list[dict[str, Any]]:
    """Poll until ``expr`` returns series (windowed queries need a few scrapes first)."""
    deadline = time.monotonic() + timeout
    while True:
        result = prometheus.query(expr)
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def test_the_shipped_collector_job_scrapes_collectors_only_and_names_the_node(
    prometheus: Prometheus, style: str
) -> None:
    targets = prometheus.api("/api/v1/targets", state="active")["activeTargets"]
    collectors = [t for t in targets if t["labels"]["job"] == "gpuscale-collector"]
    assert [t["labels"]["instance"] for t in collectors] == [NODE], "the keep rule let another pod through"
    assert collectors[0]["health"] == "up"
    dropped = prometheus.api("/api/v1/targets", state="dropped")["droppedTargets"]
    assert any(
        t["discoveredLabels"].get("__meta_kubernetes_pod_label_app_kubernetes_io_name") == "something-else"
        for t in dropped
    )
    series = prometheus.query('DCGM_FI_DEV_GPU_UTIL{pod="trainer-0"}')
    renamed = prometheus.query('DCGM_FI_DEV_GPU_UTIL{exported_pod="trainer-0"}')
    if style == "honor_labels":  # a pod's GPU keeps the pod's name, not the collector's
        assert {s["metric"]["namespace"] for s in series} == {"ml"}
        assert all("exported_pod" not in s["metric"] for s in prometheus.query("DCGM_FI_DEV_GPU_UTIL"))
    else:  # every series names the collector's pod; the GPU's pod moved to exported_*
        assert series == []
        assert {(s["metric"]["exported_namespace"], s["metric"]["pod"]) for s in renamed} == {("ml", COLLECTOR_POD[1])}


@pytest.mark.parametrize("query", QUERIES, ids=[q.id for q in QUERIES])
def test_every_dashboard_query_returns_data(prometheus: Prometheus, query: Query) -> None:
    expr = substitute(query.expr)
    result = wait_for_data(prometheus, expr)
    assert result, f"{query.id}: {expr} returned nothing"
    for series in result:
        missing = legend_labels(query.legend) - set(series["metric"])
        assert not missing, f"{query.id}: the legend names {missing}, which {expr} does not return"


def test_per_pod_panels_and_rules_show_every_pod_once(prometheus: Prometheus) -> None:
    expected = Counter((NAMESPACE, pod) for pod in (*TRAINERS, *INFER))
    [query] = [q for q in QUERIES if q.panel == "GPU Utilization by Pod"]
    panel = Counter((s["metric"]["namespace"], s["metric"]["pod"]) for s in prometheus.query(substitute(query.expr)))
    assert panel == expected
    recorded = wait_for_data(prometheus, "namespace_pod:dcgm_gpu_utilization:avg")
    assert Counter((s["metric"]["namespace"], s["metric"]["pod"]) for s in recorded) == expected


def variable_values(prometheus: Prometheus, name: str) -> set[str]:
    """The values Grafana would offer for the dashboard variable ``name``."""
    [variable] = [v for v in dashboard()["templating"]["list"] if v["name"] == name]
    query = variable_query(variable)
    if query.label:
        return set(prometheus.api(f"/api/v1/label/{query.label}/values", **{"match[]": substitute(query.selector)}))
    # query_result: Grafana writes each series as `name{label="value", ...} value timestamp` for the regex to cut
    lines = [
        "{" + ", ".join(f'{k}="{v}"' for k, v in s["metric"].items()) + "} " + " ".join(map(str, s["value"][::-1]))
        for s in prometheus.query(substitute(query.expr))
    ]
    return {m.group(1) for line in lines if (m := re.search(query.regex, line))}


@pytest.mark.parametrize("name", ["Hostname", "gpu"])
def test_dashboard_variables_have_values(prometheus: Prometheus, name: str) -> None:
    assert variable_values(prometheus, name), f"${name} would offer nothing"


def test_the_namespace_variable_offers_the_pods_namespaces_not_the_collectors(prometheus: Prometheus) -> None:
    assert variable_values(prometheus, "namespace") == {NAMESPACE}


def test_every_rule_evaluates_and_recording_rules_have_data(prometheus: Prometheus) -> None:
    deadline = time.monotonic() + 30
    while True:
        groups = prometheus.api("/api/v1/rules")["groups"]
        evaluated = [r for g in groups for r in g["rules"] if r.get("lastEvaluation", "").startswith("20")]
        if len(evaluated) == len(rules()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(evaluated) == len(rules()), "not every shipped rule was loaded and evaluated"
    unhealthy = {r["name"]: r.get("lastError") for g in groups for r in g["rules"] if r["health"] != "ok"}
    assert unhealthy == {}
    for rule in rules():
        if "record" in rule and rule["record"] not in NEEDS_A_FAULT:
            assert wait_for_data(prometheus, rule["record"]), f"{rule['record']} records nothing"


def test_no_alert_is_pending_on_a_healthy_collector(prometheus: Prometheus) -> None:
    time.sleep(3)  # several rule evaluations on live data
    alerts = prometheus.api("/api/v1/alerts")["alerts"]
    # no adapter is scraped here, so the alert for its absence is the one that must be pending
    assert [(a["labels"]["alertname"], a["state"]) for a in alerts] == [("GPUScaleAdapterDown", "pending")]


def known_series(prometheus: Prometheus) -> dict[str, set[str]]:
    """Metric name → label names, from what Prometheus scraped and from the families that appear only on faults."""
    known: dict[str, set[str]] = {}
    for series in prometheus.api("/api/v1/series", **{"match[]": '{__name__=~"DCGM_.*|gpuscale_.*|kube_.*|up"}'}):
        known.setdefault(series["__name__"], set()).update(series)
    # The adapter's families with labels show no sample until a request makes one; their declared label names are
    # what the adapter can put there.
    for metric in vars(AdapterMetrics()).values():
        if isinstance(metric, MetricWrapperBase):
            for suffix in SUFFIXES[str(metric._type)]:
                known.setdefault(metric._name + suffix, set()).update(set(metric._labelnames) | TARGET_LABELS)
    faults = SelfStats(errors=Counter({("0", "GpuIsLost"): 1}))
    for own in self_families(faults, {(0, "DCGM_FI_PROF_SM_ACTIVE"): "NotSupported"}, 1):
        for labels, _ in own.samples:
            known.setdefault(own.name, set()).update({k for k, _ in labels} | TARGET_LABELS)
    return known


def test_every_metric_and_label_used_exists(prometheus: Prometheus, style: str) -> None:
    known = known_series(prometheus)
    if style == "honor_labels":  # the renamed labels exist only under the other scrape style, checked there
        for labels in known.values():
            labels |= RENAMED
    used = [(f"rule {r.get('alert') or r.get('record')}", r["expr"]) for r in rules()]
    used += [(f"panel {q.id}", q.expr) for q in QUERIES]
    used += [(f"variable {v['name']}", v["definition"]) for v in dashboard()["templating"]["list"] if "definition" in v]
    problems = []
    for where, expr in used:
        for name, labels in metric_uses(expr):
            if name not in known:
                problems.append(f"{where}: no series {name}")
            elif labels - known[name] - {"__name__"}:
                problems.append(f"{where}: {name} has no label {labels - known[name]}")
    assert problems == []


def test_the_name_check_can_fail(prometheus: Prometheus) -> None:
    known = known_series(prometheus)
    [(typo, _)] = list(metric_uses('DCGM_FI_DEV_GPU_UTILIZATION{pod="x"}'))
    assert typo not in known
    [(name, labels)] = list(metric_uses('gpuscale_collector_errors_total{reason="x"}'))
    assert labels - known[name] == {"reason"}
