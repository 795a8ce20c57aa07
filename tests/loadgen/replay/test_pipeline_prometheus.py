"""The replay's metric pipeline against the real thing: a page whose values follow a script is scraped by a real
Prometheus every second; the samples it stored are read back and replayed through ``MetricPipeline``, whose answers
at several past times must be what the adapter, with its built-in rules as shipped ([1m] windows), serves at those
times (its queries pinned there with Prometheus's ``time`` parameter)."""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from adapter.app import create_app
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.kube.wire import parse_quantity
from harness.stores.exporter import Exporter
from harness.stores.prometheus import Prometheus, run_prometheus
from harness.waiting import wait_until
from loadgen.replay.pipeline import POD_METRICS, EngineSample, GatewaySample, GpuSample, MetricPipeline, Scrape

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

NS = "replay"
ENGINES = ("engine-0", "engine-1", "engine-2")
GATEWAY = "epp-0"
SCRAPES = 75  # scripted page versions, one a scrape; later scrapes get the last
GONE, NEW, RESET = 50, 30, 40  # engine-1 leaves at this scrape, engine-2 arrives, engine-0 restarts its counters
IDLE_QUEUES = 56  # no engine has a request waiting and the gateway holds none
CM = "/apis/custom.metrics.k8s.io/v1beta2"
EM = "/apis/external.metrics.k8s.io/v1beta1"
ENGINE_SERIES = {
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:time_to_first_token_seconds_sum": "ttft_sum",
    "vllm:time_to_first_token_seconds_count": "ttft_count",
    "vllm:request_queue_time_seconds_sum": "queue_time_sum",
    "vllm:request_queue_time_seconds_count": "queue_time_count",
    "vllm:request_success_total": "success_total",
    "vllm:num_incoming_requests_total": "incoming_total",
}
GPU = "DCGM_FI_DEV_GPU_UTIL"
QUEUE, REQUESTS = "inference_extension_flow_control_queue_size", "inference_objective_request_total"


def _engine_lines(pod: str, n: int, since: int) -> list[str]:
    age = n - since  # scrapes since the engine (re)started its counters
    count = 2 * age + age % 3
    values = {
        "waiting": n % 7,
        "running": -1 if n % 9 == 0 else 3 + n % 4,  # -1: a count no engine can mean, left out
        "kv_cache_usage": (n * 7 % 12) / 10,  # 1.1 now and then: left out
        "ttft_sum": 0.25 * count + 0.01 * (age % 5),
        "ttft_count": count,
        "queue_time_sum": 0.1 * count,
        "queue_time_count": count,
        "success_total": count,
        "incoming_total": count + 3,
    }
    labels = f'namespace="{NS}",pod="{pod}",model_name="m"'
    lines = [f"{name}{{{labels}}} {values[field]!r}" for name, field in ENGINE_SERIES.items()]
    gpu = "NaN" if 20 <= n < 24 else repr(90.0 + n % 5 + 0.25 * (pod == "engine-1"))
    lines.append(f'{GPU}{{gpu="{ENGINES.index(pod)}",UUID="GPU-{pod}",Hostname="node-a",{labels}}} {gpu}')
    return lines


def page(n: int) -> str:
    """The page at its n-th scrape."""
    n = min(n, SCRAPES - 1)
    lines = _engine_lines("engine-0", n, 0 if n < RESET else RESET)
    if n < GONE:
        lines += _engine_lines("engine-1", n, 0)
    if n >= NEW:
        lines += _engine_lines("engine-2", n, NEW)
    lines.append(f'{QUEUE}{{namespace="{NS}",pod="{GATEWAY}"}} {n % 4}')
    # more arrive than the engines finish: the capacity demand's arrivals factor counts while any request waits
    lines.append(f'{REQUESTS}{{namespace="{NS}",pod="{GATEWAY}",model_name="m"}} {7 * n + n % 2}')
    return "\n".join(lines) + "\n"


class ScriptedPage:
    def __init__(self) -> None:
        self.scrapes = 0
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            n, self.scrapes = self.scrapes, self.scrapes + 1
        return page(n)


@pytest.fixture
def scripted() -> Iterator[tuple[ScriptedPage, Exporter]]:
    script = ScriptedPage()
    with Exporter(script) as exporter:
        yield script, exporter


def stored(prom: Prometheus) -> list[Scrape]:
    """What Prometheus stored, as the replay's scrapes: one per scrape of the page (its ``up`` sample)."""
    ups = prom.api("/api/v1/query", query='up{job="gpuscale-collector"}[10m]')["result"][0]["values"]
    by_time: dict[int, dict[tuple[str, str], float]] = defaultdict(dict)
    for series in prom.api("/api/v1/query", query=f'{{namespace="{NS}"}}[10m]')["result"]:
        name, pod = series["metric"]["__name__"], series["metric"]["pod"]
        for t, v in series["values"]:
            by_time[round(t * 1000)][(name, pod)] = float(v)
    scrapes = []
    for t, _ in ups:
        ms = round(t * 1000)
        at = by_time[ms]
        engines = [
            EngineSample(NS, pod, "node-a", **{f: at[(name, pod)] for name, f in ENGINE_SERIES.items()})
            for pod in ENGINES
            if ("vllm:num_requests_waiting", pod) in at
        ]
        gpus = [GpuSample(NS, pod, "node-a", at[(GPU, pod)]) for pod in ENGINES if (GPU, pod) in at]
        gateways = [GatewaySample(NS, GATEWAY, at[(QUEUE, GATEWAY)], at[(REQUESTS, GATEWAY)])] if at else []
        scrapes.append(Scrape(ms / 1000, engines, gpus, gateways))
    return scrapes


def first_with(pod: str, scrapes: list[Scrape]) -> float:
    return next(s.at for s in scrapes if any(e.pod == pod for e in s.engines))


def first_without(pod: str, scrapes: list[Scrape]) -> float:
    """When the pod's page went: a scrape without it after one with it."""
    since = first_with(pod, scrapes)
    return next(s.at for s in scrapes if s.at > since and all(e.pod != pod for e in s.engines))


async def served_at(
    prom: Prometheus, kubeconfig: Path, at: int
) -> tuple[dict[str, dict[str, float]], dict[str, float | None]]:
    """The adapter's Pods metrics (pod → value) and External metrics at ``at``, a whole second, from an adapter that
    is stopped before this returns (one per query time: left running, their watches and connections pile up)."""
    settings = settings_for(f"{prom.url}/?time={at}", kubeconfig, cache_ttl=0.0)
    async with TestClient(TestServer(create_app(settings))) as client:
        adapter = Adapter(client)
        await wait_until(lambda: adapter.components.objects.synced, what="metadata cache synced")

        async def get(path: str) -> list[dict[str, Any]]:
            resp = await client.get(path)
            body = await resp.json()
            assert resp.status in (200, 404), body
            items: list[dict[str, Any]] = body.get("items", [])
            return items

        pods = {
            metric: {
                item["describedObject"]["name"]: float(parse_quantity(item["value"]))
                for item in await get(f"{CM}/namespaces/{NS}/pods/*/{metric}")
            }
            for metric in POD_METRICS
        }
        external: dict[str, float | None] = {}
        for metric in ("inference_demand", "inference_request_rate", "inference_requests_waiting",
                       "inference_capacity_demand", "inference_activity"):  # fmt: skip
            items = await get(f"{EM}/namespaces/{NS}/{metric}")
            external[metric] = float(parse_quantity(items[0]["value"])) if items else None
        return pods, external


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=2e-9)  # the adapter's quantities are nano-units


async def test_the_replay_serves_what_prometheus_and_the_adapter_serve(
    scripted: tuple[ScriptedPage, Exporter], tmp_path: Path
) -> None:
    script, exporter = scripted
    kube = FakeKubeAPIServer()
    kube.put("namespaces", NS, {})
    for pod in (*ENGINES, GATEWAY):  # engine-1 stays in Kubernetes: only staleness hides its series
        kube.put("pods", pod, {"app": "engine"}, namespace=NS)
    await kube.start()
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
    try:
        with run_prometheus(tmp_path / "prometheus", [exporter.target], scrape_interval="1s") as prom:
            await wait_until(lambda: script.scrapes > SCRAPES + 2, within=SCRAPES + 60, what="the script scraped")
            scrapes = stored(prom)
            # query times: whole seconds after the scrapes that started the script, engine-2's arrival, engine-0's
            # reset, engine-1's going, one where nothing waits or is held (n % 7 and n % 4 both 0), and the end
            ks = (12, NEW + 3, RESET + 4, GONE, GONE + 1, IDLE_QUEUES, SCRAPES - 1)
            times = [math.ceil(scrapes[k].at) for k in ks]
            for at in times:
                pipeline = MetricPipeline()
                for scrape in (s for s in scrapes if s.at <= at):
                    pipeline.scrape(scrape)
                pods, external = await served_at(prom, kubeconfig, at)
                for metric in POD_METRICS:
                    replayed = {pod: v for (_, pod), v in pipeline.pods(metric, at).items()}
                    assert replayed.keys() == pods[metric].keys(), (metric, at)
                    assert all(close(replayed[p], pods[metric][p]) for p in replayed), (metric, at, replayed, pods)
                for metric, value in external.items():
                    assert close(pipeline.external(metric, NS, at), value), (metric, at, value)
                waiting = pods["inference_requests_waiting"].keys()
                assert ("engine-1" in waiting) == (at < first_without("engine-1", scrapes)), (at, waiting)
                assert ("engine-2" in waiting) == (at >= first_with("engine-2", scrapes)), (at, waiting)
    finally:
        await kube.stop()
