"""``inference_capacity_demand`` and ``inference_activity``, the signals scaling on what arrives (docs/adapter.md,
"Scaling on what arrives"), end to end: one page scraped every second by a real Prometheus, read through the
external metrics API and the KEDA scaler, each value worked out by hand below.

Every counter on the page moves by a fixed step at each scrape and all share the page's scrape times, so Prometheus
extrapolates their rates alike and a ratio of two rates is exact whatever the scrape interval."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from adapter.app import KEDA
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from harness.adapter.in_process import Adapter, MakeKedaAdapter
from harness.deploy.prometheus_files import RULES
from harness.stores.exporter import Exporter
from harness.stores.prometheus import Prometheus, run_prometheus

pytestmark = [pytest.mark.prometheus]

EM = "/apis/external.metrics.k8s.io/v1beta1"
NAMESPACES = (
    "burst", "calm", "surge", "surge-held", "held", "queued", "backlog", "sg", "idle", "generating", "cold", "waking"
)  # fmt: skip


class Page:
    """The page at its n-th scrape: (namespace, pod, series, labels, value), ``n`` moving the counters."""

    def __init__(self) -> None:
        self.scrapes = 0
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            n, self.scrapes = self.scrapes, self.scrapes + 1
        lines = []
        for namespace, pod, name, labels, value in series(n):
            lines.append(f'{name}{{namespace="{namespace}",pod="{pod}"{labels}}} {value!r}')
        return "\n".join(lines) + "\n"


def vllm(namespace: str, pod: str, n: int, *, kv: float, done: int, waiting: int = 0, running: int = 0) -> list[Any]:
    """A vLLM engine: ``done`` requests finish between two scrapes."""
    return [
        (namespace, pod, "vllm:num_requests_waiting", ',model_name="m"', float(waiting)),
        (namespace, pod, "vllm:num_requests_running", ',model_name="m"', float(running)),
        (namespace, pod, "vllm:kv_cache_usage_perc", ',model_name="m"', kv),
        (namespace, pod, "vllm:request_success_total", ',model_name="m",finished_reason="stop"', float(done * n)),
    ]


def gateway(namespace: str, n: int, *, arriving: int, held: int = 0) -> list[Any]:
    """The endpoint picker: ``arriving`` requests between two scrapes, ``held`` in its flow-control queue."""
    return [
        (namespace, "epp-0", "llm_d_epp_request_total", ',model_name="m"', float(arriving * n)),
        (namespace, "epp-0", "llm_d_epp_flow_control_queue_size", "", float(held)),
    ]


def series(n: int) -> list[Any]:
    return [
        # two engines full or nearly (KV 1.0 and 0.9), finishing 4 requests a scrape while 12 arrive
        *vllm("burst", "engine-0", n, kv=1.0, done=2, running=30, waiting=40),
        *vllm("burst", "engine-1", n, kv=0.9, done=2, running=28, waiting=35),
        *gateway("burst", n, arriving=12),
        # keeping up: 2 arrive, 4 finish (the minute's rates can say more finish than arrive)
        *vllm("calm", "engine-0", n, kv=0.5, done=4, running=5),
        *gateway("calm", n, arriving=2),
        # 3 times as many arrive as finish, and nothing waits: the first seconds after a quiet minute
        *vllm("surge", "engine-0", n, kv=0.4, done=2, running=20),
        *gateway("surge", n, arriving=6),
        # the same, with 10 requests held at the gateway
        *vllm("surge-held", "engine-0", n, kv=0.4, done=2, running=20),
        *gateway("surge-held", n, arriving=6, held=10),
        # the gateway holds 120 requests; 4 arrive and 4 finish a scrape
        *vllm("held", "engine-0", n, kv=0.8, done=4, running=20),
        *gateway("held", n, arriving=4, held=120),
        # keeping up, but 5 wait beside 10 running; and a backlog of 40 behind 4 running
        *vllm("queued", "engine-0", n, kv=0.5, done=4, running=10, waiting=5),
        *gateway("queued", n, arriving=4),
        *vllm("backlog", "engine-0", n, kv=1.0, done=4, running=4, waiting=40),
        *gateway("backlog", n, arriving=4),
        # SGLang counts its arrivals at /generate and what it finished in sglang:num_requests_total
        ("sg", "sglang-0", "sglang:token_usage", ',model_name="m"', 0.6),
        ("sg", "sglang-0", "sglang:num_requests_total", ',model_name="m"', float(3 * n)),
        ("sg", "sglang-0", "sglang:num_queue_reqs", ',model_name="m"', 2.0),
        ("sg", "sglang-0", "sglang:http_requests_total", ',endpoint="/generate",method="POST"', float(6 * n)),
        ("sg", "sglang-0", "sglang:http_requests_total", ',endpoint="/metrics",method="GET"', float(50 * n)),
        # nothing arrives, waits or runs; a quarter of the KV cache still holds prefixes
        *vllm("idle", "engine-0", 0, kv=0.25, done=4),
        *gateway("idle", 0, arriving=5),
        # nothing arrives, but one engine is still generating
        *vllm("generating", "engine-0", 0, kv=0.4, done=4, running=3),
        *gateway("generating", 0, arriving=5),
        # no replica: the gateway holds 5 requests, or counts arrivals
        *gateway("cold", 0, arriving=9, held=5),
        *gateway("waking", n, arriving=1),
    ]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with contextlib.ExitStack() as stack:
        page = stack.enter_context(Exporter(Page()))
        # with the shipped recording rules, whose per-namespace capacity demand the forecast reads
        config = {"rule_files": [str(RULES)]}
        prom = stack.enter_context(
            run_prometheus(tmp_path_factory.mktemp("prometheus"), [page.target], extra_config=config)
        )
        # a minute of scrapes: every rate's window full
        prom.wait_for('count_over_time(vllm:kv_cache_usage_perc{namespace="burst"}[1m]) >= 60', timeout=90)
        yield prom


@pytest.fixture
async def adapter(prometheus: Prometheus, make_keda_adapter: MakeKedaAdapter) -> Adapter:
    return await make_keda_adapter(prometheus.url, NAMESPACES)


async def external(adapter: Adapter, metric: str, namespace: str) -> float | None:
    """The namespace's value; None where the adapter has none (an empty list, or 404 for a metric with no series)."""
    resp = await adapter.client.get(f"{EM}/namespaces/{namespace}/{metric}")
    body = await resp.json()
    if resp.status == 404:
        return None
    assert resp.status == 200, body
    if not body["items"]:
        return None
    (item,) = body["items"]
    return quantity(item["value"])


def quantity(text: str) -> float:
    scale = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3}.get(text[-1:], 1.0)
    return float(text[:-1] if text[-1:] in "numk" else text) * scale


async def test_both_are_listed_as_external_metrics(adapter: Adapter) -> None:
    names = {r["name"] for r in (await adapter.get(EM))["resources"]}
    assert {"inference_capacity_demand", "inference_activity"} <= names


async def test_capacity_demand_is_the_kv_use_scaled_by_what_arrives_over_what_finishes(adapter: Adapter) -> None:
    # burst: mean KV 95 %, 12 arriving over 4 finishing a scrape: 95 x 3
    assert await external(adapter, "inference_capacity_demand", "burst") == pytest.approx(285, rel=1e-9)
    # SGLang, 2 in its queue: 60 % x 6 arriving at /generate over 3 finished (the scrapes of /metrics are no requests)
    assert await external(adapter, "inference_capacity_demand", "sg") == pytest.approx(120, rel=1e-9)


async def test_capacity_demand_never_falls_below_the_kv_use(adapter: Adapter) -> None:
    # fewer arrive than finish: the KV use alone, 50
    assert await external(adapter, "inference_capacity_demand", "calm") == pytest.approx(50, rel=1e-9)
    # nothing finished in the last minute: the KV use alone, 25 and 40
    assert await external(adapter, "inference_capacity_demand", "idle") == pytest.approx(25, rel=1e-9)
    assert await external(adapter, "inference_capacity_demand", "generating") == pytest.approx(40, rel=1e-9)


async def test_arrivals_beyond_what_finishes_count_only_while_requests_wait(adapter: Adapter) -> None:
    # 6 arrive over 2 finishing a scrape, none waiting or held: the KV use, 40, which already holds what arrived
    assert await external(adapter, "inference_capacity_demand", "surge") == pytest.approx(40, rel=1e-9)
    # the same with 10 held at the gateway: 40 x 3
    assert await external(adapter, "inference_capacity_demand", "surge-held") == pytest.approx(120, rel=1e-9)


async def test_the_gateways_held_requests_count_once_as_they_arrived(adapter: Adapter) -> None:
    # 4 a scrape arrive (the gateway's counter counts them as they arrive, held or not) and 4 finish: the KV use,
    # 80; the 120 held are not counted again
    assert await external(adapter, "inference_capacity_demand", "held") == pytest.approx(80, rel=1e-9)


async def test_a_queue_counts_for_what_waits_beside_what_runs_up_to_as_much_again(adapter: Adapter) -> None:
    # as many arrive as finish; (10 running + 5 waiting) / 10: 1.5 x the KV use, 50
    assert await external(adapter, "inference_capacity_demand", "queued") == pytest.approx(75, rel=1e-9)
    # (4 + 40) / 4 = 11, counted as 2: a backlog no new replica can take asks for at most as much again
    assert await external(adapter, "inference_capacity_demand", "backlog") == pytest.approx(200, rel=1e-9)
    # burst's engines wait 40 and 35 beside 30 and 28 running (2 each, capped): the arrivals' 3 is larger (above)


async def test_the_recording_rule_records_the_same_demand_in_replicas(adapter: Adapter, prometheus: Prometheus) -> None:
    # namespace:inference_capacity_demand_replicas:sum is the same formula written by namespace in
    # manifests/prometheus/gpuscale-rules.yaml: the adapter's percent times the engines reporting, over 100
    engines = {"burst": 2, "calm": 1, "surge": 1, "surge-held": 1, "held": 1, "queued": 1, "backlog": 1, "sg": 1,
               "idle": 1, "generating": 1}  # fmt: skip
    record = "namespace:inference_capacity_demand_replicas:sum"
    prometheus.wait_for(f'{record}{{namespace="burst"}}', timeout=30)
    recorded = {r["metric"]["namespace"]: float(r["value"][1]) for r in prometheus.query(record)}
    assert recorded.keys() == engines.keys()
    for namespace, n in engines.items():
        demand = await external(adapter, "inference_capacity_demand", namespace)
        assert demand is not None, namespace
        assert recorded[namespace] == pytest.approx(demand * n / 100, rel=1e-9), namespace


async def test_capacity_demand_has_no_value_without_a_ready_engine(adapter: Adapter) -> None:
    assert await external(adapter, "inference_capacity_demand", "cold") is None
    assert await external(adapter, "inference_capacity_demand", "waking") is None


async def test_activity_is_1_while_anything_arrives_waits_or_runs(adapter: Adapter) -> None:
    expected = {"burst": 1, "calm": 1, "held": 1, "queued": 1, "backlog": 1, "sg": 1, "generating": 1, "cold": 1,
                "waking": 1, "idle": 0}  # fmt: skip
    assert {ns: await external(adapter, "inference_activity", ns) for ns in expected} == expected


async def test_through_keda(adapter: Adapter) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{adapter.client.app[KEDA].port}") as channel:
        stub: Any = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]

        def ref(namespace: str, metric: str) -> Any:
            metadata = {"metricName": metric, "metricType": "external", "targetValue": "80"}
            return pb.ScaledObjectRef(name="s", namespace=namespace, scalerMetadata=metadata)

        burst = ref("burst", "inference_capacity_demand")
        asked = pb.GetMetricsRequest(scaledObjectRef=burst, metricName="inference_capacity_demand")
        (value,) = [v.metricValueFloat for v in (await stub.GetMetrics(asked)).metricValues]
        assert value == pytest.approx(285, rel=1e-9)
        # the activity wakes a namespace whose gateway holds requests, and lets the idle one go to zero
        assert (await stub.IsActive(ref("cold", "inference_activity"))).result is True
        assert (await stub.IsActive(ref("generating", "inference_activity"))).result is True
        assert (await stub.IsActive(ref("idle", "inference_activity"))).result is False
