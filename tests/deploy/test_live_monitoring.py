"""The dashboard and the rules against a real Prometheus that scrapes the real collector (simulated GPUs, pods on
them, one GPU shared) through the shipped scrape job, and again through a job like dcgm-exporter's ServiceMonitor
(the collector's pod labels renamed exported_*): every panel query returns data with the labels its legend names,
every rule evaluates, the recording rules produce series, no GPU or collector alert is pending on a healthy
collector, and every metric and label the rules and panels name exists."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web
from prometheus_client.metrics import MetricWrapperBase

from adapter.self_metrics import AdapterMetrics
from collector.counters.dcgm_names import SPELLINGS
from collector.self_metrics import SelfStats, self_families
from demo.node import INFER, TRAINERS, simulated_setup
from harness.deploy.manifests import ROOT
from harness.deploy.prometheus_files import RULES, offline_scrape_config, rules
from harness.deploy.promql_names import (
    Query,
    dashboard,
    legend_labels,
    metric_uses,
    queries,
    substitute,
    variable_query,
)
from harness.kube.api import FakeKubeAPIServer
from harness.node.kubelet import FakePod, PodResourcesServer
from harness.processes import free_port
from harness.stores.prometheus import Prometheus, run_prometheus

# What the dashboard and the rules are checked against: real programs on 127.0.0.1.
#
# - the collector as a process, on the demo's simulated GPUs (three pods on a GPU each, two pods sharing one), with
#   the demo's stand-ins for the kubelet's pod-resources API and for the Kubernetes API (which names the pods of the
#   shared GPU);
# - a stand-in for kube-state-metrics (aiohttp) serving the HPA series the dashboard shows;
# - a real Prometheus whose collector job is the shipped one (manifests/prometheus/scrape-configs.yaml), with Kubernetes
#   discovery replaced by static targets that carry the labels discovery would set, and the shipped rules loaded; or,
#   with ``renamed``, the job as dcgm-exporter's ServiceMonitor makes it: no honor_labels and the collector's own
#   namespace/pod/container as target labels, so Prometheus renames the series' own to exported_*.
#
# The asyncio servers run on an event loop in a thread of their own, so tests can block on Prometheus meanwhile.

T = TypeVar("T")
NODE = "gpu-node-1"  # NODE_NAME of the collector, so its Hostname label, and the node its job's instance names
NAMESPACE = "ml"
COLLECTOR_POD = ("gpuscale", "gpuscale-collector-x1", "collector")  # namespace, pod, container of the collector
KSM_TEXT = """\
# TYPE kube_horizontalpodautoscaler_status_current_replicas gauge
kube_horizontalpodautoscaler_status_current_replicas{namespace="ml",horizontalpodautoscaler="trainer"} 3
# TYPE kube_horizontalpodautoscaler_status_desired_replicas gauge
kube_horizontalpodautoscaler_status_desired_replicas{namespace="ml",horizontalpodautoscaler="trainer"} 1
# TYPE kube_horizontalpodautoscaler_spec_max_replicas gauge
kube_horizontalpodautoscaler_spec_max_replicas{namespace="ml",horizontalpodautoscaler="trainer"} 8
"""


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="live-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.run(self.loop.shutdown_asyncgens())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()


async def _serve_ksm() -> tuple[web.AppRunner, str]:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=KSM_TEXT, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"{host}:{port}"


def prometheus_config(collector: str, decoy: str, ksm: str, renamed: bool = False) -> dict[str, Any]:
    def pod(target: str, app: str) -> dict[str, Any]:
        namespace, name, container = COLLECTOR_POD
        labels = {
            "__meta_kubernetes_pod_label_app_kubernetes_io_name": app,
            "__meta_kubernetes_pod_container_port_name": "metrics",
            "__meta_kubernetes_pod_node_name": NODE,
            "__meta_kubernetes_namespace": namespace,
            "__meta_kubernetes_pod_name": name,
            "__meta_kubernetes_pod_container_name": container,
        }
        return {"targets": [target], "labels": labels}

    # another pod of the namespace next to the collector: the job's keep rule must drop it
    discovered = {"gpuscale-collector": [pod(collector, "gpuscale-collector"), pod(decoy, "something-else")]}
    discovered["gpuscale-adapter"] = []
    shipped = offline_scrape_config(discovered)
    [collector_job] = [j for j in shipped["scrape_configs"] if j["job_name"] == "gpuscale-collector"]
    # the shipped 5 s, shortened so the test needs seconds, not minutes
    collector_job.update(scrape_interval="1s", scrape_timeout="1s")
    if renamed:
        # what the Prometheus Operator generates for dcgm-exporter's ServiceMonitor (honorLabels false)
        collector_job["honor_labels"] = False
        collector_job["relabel_configs"] += [
            {"source_labels": [f"__meta_kubernetes_{meta}"], "target_label": label}
            for meta, label in (("namespace", "namespace"), ("pod_name", "pod"), ("pod_container_name", "container"))
        ]
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [collector_job, {"job_name": "kube-state-metrics", "static_configs": [{"targets": [ksm]}]}],
    }


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as resp:
            if resp.status == 200:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the collector did not come up: {log.read_text()[-2000:]}")
        time.sleep(0.2)


@contextlib.contextmanager
def live_monitoring(workdir: Path, renamed: bool = False) -> Iterator[Prometheus]:
    loop = LoopThread()
    kube = FakeKubeAPIServer()
    kubelet = PodResourcesServer(str(workdir / "kubelet.sock")).start()
    process: subprocess.Popen[bytes] | None = None
    ksm: web.AppRunner | None = None
    try:
        loop.run(kube.start())
        collector_args, pods = simulated_setup(workdir)

        async def put_pods() -> None:  # on the API server's loop: it wakes its watches
            for p in pods:
                uid = p.uid or f"uid-{p.name}"
                kube.put("pods", p.name, p.labels, namespace=NAMESPACE, uid=uid, spec={"nodeName": NODE})

        loop.run(put_pods())
        kubelet.pods = [FakePod(NAMESPACE, p.name, {"main": [(p.resource, list(p.device_ids))]}) for p in pods]
        port = free_port()
        log = workdir / "collector.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "collector", "-a", f"127.0.0.1:{port}", "--kubernetes",
                 "--kubeconfig", str(kube.kubeconfig(workdir / "kubeconfig")),
                 "--pod-resources-kubelet-socket", kubelet.socket_path, *collector_args],
                cwd=ROOT, env={**os.environ, "NODE_NAME": NODE}, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        _wait_ready(f"http://127.0.0.1:{port}/health", process, log)
        ksm, ksm_target = loop.run(_serve_ksm())
        config = prometheus_config(f"127.0.0.1:{port}", ksm_target, ksm_target, renamed)
        with run_prometheus(workdir / "prometheus", extra_config=config) as prometheus:
            yield prometheus
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if ksm is not None:
            loop.run(ksm.cleanup())
        kubelet.stop()
        loop.run(kube.stop())
        loop.close()


pytestmark = [pytest.mark.prometheus, pytest.mark.slow]
QUERIES = queries(dashboard())
# A recording rule whose input only exists after a fault the simulated GPUs do not make (an XID); promtool's unit
# tests show it working.
NEEDS_A_FAULT = {"gpu:dcgm_xid_errors:last"}
# Recorded from inference engines' series, which no engine here writes (promtool's unit test has them).
NEEDS_ENGINES = {"namespace:inference_capacity_demand_replicas:sum"}
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
        # the collector's default names are dcgm-exporter 4.10's: every dashboard query must find them
        prom.wait_for('count(DCGM_FI_DEV_GPU_UTIL_RATIO{pod!=""})', timeout=90)
        pod_label = "exported_pod" if style == "renamed" else "pod"
        for pod in (*TRAINERS, *INFER):
            prom.wait_for(f'DCGM_FI_DEV_GPU_UTIL_RATIO{{{pod_label}="{pod}"}}', timeout=60)
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
    series = prometheus.query('DCGM_FI_DEV_GPU_UTIL_RATIO{pod="trainer-0"}')
    renamed = prometheus.query('DCGM_FI_DEV_GPU_UTIL_RATIO{exported_pod="trainer-0"}')
    if style == "honor_labels":  # a pod's GPU keeps the pod's name, not the collector's
        assert {s["metric"]["namespace"] for s in series} == {"ml"}
        assert all("exported_pod" not in s["metric"] for s in prometheus.query("DCGM_FI_DEV_GPU_UTIL_RATIO"))
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
        if "record" in rule and rule["record"] not in NEEDS_A_FAULT | NEEDS_ENGINES:
            assert wait_for_data(prometheus, rule["record"]), f"{rule['record']} records nothing"


def test_no_alert_is_pending_on_a_healthy_collector(prometheus: Prometheus) -> None:
    # several evaluations of every rule group on live data: each group's lastEvaluation seen at three values
    seen: dict[str, set[str]] = {}
    deadline = time.monotonic() + 60
    while not seen or min(len(times) for times in seen.values()) < 3:
        assert time.monotonic() < deadline, f"the rule groups were not evaluated three times: {seen}"
        for group in prometheus.api("/api/v1/rules")["groups"]:
            seen.setdefault(group["name"], set()).add(group.get("lastEvaluation", ""))
        time.sleep(0.2)
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
    # the dashboards and rules read each series under dcgm-exporter 4.8's name too, which the collector serves with
    # --dcgm-names=pre-4.9 with the same labels as the 4.10 name scraped here
    for new, spelling in SPELLINGS.items():
        if new in known:
            known.setdefault(spelling.field, set()).update(known[new])
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
