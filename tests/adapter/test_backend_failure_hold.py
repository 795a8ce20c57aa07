"""--backend-failure-hold against a real Prometheus that is killed and started again: each question is answered with
its last good answer (Prometheus' timestamps kept) for at most the hold after it was read, then 503; a question never
answered is a 503 at once; /readyz, /metrics and explain say what is held; once Prometheus is back the answers are
fresh and the hold counts from them. The same through KEDA's scaler over gRPC. The hold's clock is the test's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from adapter.app import KEDA
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.settings import KedaSettings
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.exporter import GPU, Exporter, exposition
from harness.stores.prometheus import Prometheus, run_prometheus
from harness.waiting import eventually

pytestmark = pytest.mark.prometheus

MakeAdapter = Callable[..., Awaitable[Adapter]]
PODS = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization"
TRAINERS = "app=trainer"
OTHERS = "app=other"  # the same metric and namespace, another selector: never asked before
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/gpu_utilization"
HOLD = 60.0
TRIGGER = {
    "metricName": "gpu_utilization",
    "labelSelector": "app=trainer",
    "targetValue": "60",
    "activationValue": "50",
}


class Clock:
    """The held answers' clock, moved by the test instead of waiting for the hold to pass."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Level:
    """The exporter's page: trainer-0's GPU and trainer-1's (namespace ml, pods the stand-in API server has) and an
    engine's GPU (namespace llm, read as the external metric), both at ``value``, read at every scrape."""

    def __init__(self) -> None:
        self.value = "90"
        self.series = 3

    def text(self) -> str:
        gpu = {"UUID": "GPU-h0", "gpu": "0", "Hostname": "node-a", "modelName": "NVIDIA H200"}
        return exposition(
            [
                (GPU, {**gpu, "pod": "trainer-0", "namespace": "ml", "container": "main"}, self.value),
                (GPU, {**gpu, "UUID": "GPU-h2", "gpu": "2", "pod": "trainer-1", "namespace": "ml"}, self.value),
                (GPU, {**gpu, "UUID": "GPU-h1", "gpu": "1", "pod": "engine-0", "namespace": "llm"}, self.value),
            ]
        )


class Outage:
    """A Prometheus scraping ``level``, killed (SIGKILL) and started again on the same port and data."""

    def __init__(self, tmp: Path, level: Level, target: str) -> None:
        self.tmp, self.level, self.target = tmp, level, target
        self._stack = contextlib.ExitStack()
        self.prometheus: Prometheus | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        assert self.prometheus is not None
        return self.prometheus.url

    def start(self) -> None:
        self.prometheus = self._stack.enter_context(run_prometheus(self.tmp, [self.target], port=self.port))
        self.port = int(self.prometheus.url.rsplit(":", 1)[1])
        self.prometheus.wait_for(f"{GPU} == {self.level.value}", min_results=self.level.series)

    def kill(self) -> None:
        assert self.prometheus is not None
        self.prometheus.process.kill()
        self.prometheus.process.wait()

    def close(self) -> None:
        self._stack.close()


@pytest.fixture
def level() -> Level:
    return Level()


@pytest.fixture
def outage(tmp_path: Path, level: Level) -> Iterator[Outage]:
    with Exporter(level.text) as exporter:
        o = Outage(tmp_path / "prometheus", level, exporter.target)
        try:
            o.start()
            yield o
        finally:
            o.close()


def values(answer: dict[str, Any]) -> dict[str, str]:
    return {item["describedObject"]["name"]: item["value"] for item in answer["items"]}


async def readyz(adapter: Adapter) -> tuple[int, str]:
    resp = await adapter.client.get("/readyz")
    return resp.status, await resp.text()


def gauge(adapter: Adapter, name: str, **labels: str) -> float | None:
    return adapter.components.metrics.registry.get_sample_value(f"gpuscale_adapter_{name}", labels)


async def test_answers_are_held_through_an_outage_then_refused_then_fresh_again(
    kube: FakeKubeAPIServer, outage: Outage, level: Level, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    clock = Clock()
    settings = settings_for(
        outage.url, kube.kubeconfig(tmp_path / "kubeconfig"), cache_ttl=0.0, backend_failure_hold=HOLD
    )
    adapter = await make_adapter(settings, clock=clock)
    pods, external = await adapter.get(PODS, labelSelector=TRAINERS), await adapter.get(EXTERNAL)
    assert values(pods) == {"trainer-0": "90", "trainer-1": "90"}
    assert [item["value"] for item in external["items"]] == ["90"]
    assert await readyz(adapter) == (200, "ok")

    outage.kill()
    level.value = "10"  # what Prometheus would read now, were it up
    clock.advance(30)
    # the same answers, byte for byte: the values and the timestamps Prometheus gave them 30 s before
    assert await adapter.get(PODS, labelSelector=TRAINERS) == pods
    assert await adapter.get(EXTERNAL) == external
    # a question never answered has nothing to hold: another selector of the same metric and namespace
    refused = await adapter.get(PODS, 503, labelSelector=OTHERS)
    assert refused["message"] == "the metrics backend (Prometheus) is currently unavailable"

    status, body = await readyz(adapter)
    assert status == 200
    assert (
        "[+]held-answers ok, 2 answers held while Prometheus fails (custom 1, external 1), the oldest read 30s ago, "
        "each served at most 60s after it was read (--backend-failure-hold), Prometheus /api/v1/query at "
    ) in body
    assert body.endswith("readyz check passed\n")
    assert gauge(adapter, "held_answers", api="custom") == gauge(adapter, "held_answers", api="external") == 1
    assert gauge(adapter, "held_answers_oldest_age_seconds", api="custom") == 30
    assert gauge(adapter, "held_answers_served_total", api="custom") == 1

    report = await adapter.get("/explain" + PODS, labelSelector=TRAINERS)
    assert report["answer"]["items"] == pods["items"]
    assert report["held"]["ageSeconds"] == 30
    assert report["held"]["holdSeconds"] == HOLD
    assert "unreachable" in report["held"]["error"]
    assert any("this is the last good answer, read 30s ago" in line for line in report["why"])

    clock.advance(HOLD - 30)  # the hold is over: 60 s after the answers were read
    await adapter.get(PODS, 503, labelSelector=TRAINERS)
    await adapter.get(EXTERNAL, 503)
    assert await readyz(adapter) == (200, "ok")
    assert gauge(adapter, "held_answers", api="custom") == 0
    assert gauge(adapter, "held_answers_oldest_age_seconds", api="custom") == 0

    outage.start()

    async def fresh() -> bool:
        resp = await adapter.client.get(PODS, params={"labelSelector": TRAINERS})
        return resp.status == 200 and values(await resp.json()) == {"trainer-0": "10", "trainer-1": "10"}

    await eventually(fresh, within=30, what="fresh values once Prometheus is back")
    again = await adapter.get(PODS, labelSelector=TRAINERS)
    assert again["items"][0]["timestamp"] > pods["items"][0]["timestamp"]

    # the hold counts from the fresh answer: killed again, it is served 59 s later, not the old one
    outage.kill()
    clock.advance(HOLD - 1)
    assert await adapter.get(PODS, labelSelector=TRAINERS) == again


async def test_without_a_hold_an_outage_is_a_503_at_once(
    kube: FakeKubeAPIServer, outage: Outage, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    adapter = await make_adapter(settings_for(outage.url, kube.kubeconfig(tmp_path / "kubeconfig"), cache_ttl=0.0))
    assert values(await adapter.get(PODS, labelSelector=TRAINERS)) == {"trainer-0": "90", "trainer-1": "90"}
    outage.kill()
    await adapter.get(PODS, 503, labelSelector=TRAINERS)
    await adapter.get(EXTERNAL, 503)
    assert await readyz(adapter) == (200, "ok")
    assert "held-answers" not in (await (await adapter.client.get("/readyz?verbose")).text())
    assert gauge(adapter, "held_answers_served_total", api="custom") is None


async def test_a_pod_deleted_during_the_outage_leaves_the_held_answer(
    kube: FakeKubeAPIServer, outage: Outage, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    settings = settings_for(
        outage.url, kube.kubeconfig(tmp_path / "kubeconfig"), cache_ttl=0.0, backend_failure_hold=HOLD
    )
    adapter = await make_adapter(settings, clock=Clock())
    pods = await adapter.get(PODS, labelSelector=TRAINERS)
    assert values(pods) == {"trainer-0": "90", "trainer-1": "90"}
    outage.kill()
    kube.delete("pods", "trainer-1", "ml")  # the watch cache still follows the cluster; the HPA asks for the rest

    async def gone() -> bool:
        return values(await adapter.get(PODS, labelSelector=TRAINERS)) == {"trainer-0": "90"}

    await eventually(gone, what="the deleted pod to leave the held answer")
    assert (await adapter.get(PODS, labelSelector=TRAINERS))["items"] == pods["items"][:1]


def ref(metadata: dict[str, str]) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="scaled", namespace="ml", scalerMetadata=metadata)


@contextlib.asynccontextmanager
async def scaler(adapter: Adapter) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{adapter.client.app[KEDA].port}") as channel:
        yield pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]


async def metric(stub: Any, trigger: dict[str, str]) -> float:
    request = pb.GetMetricsRequest(scaledObjectRef=ref(trigger), metricName=trigger["metricName"])
    [value] = (await stub.GetMetrics(request)).metricValues
    return float(value.metricValueFloat)


async def unavailable(call: Awaitable[Any]) -> bool:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value.code() is grpc.StatusCode.UNAVAILABLE


async def next_activity(stream: Any) -> bool:
    async with asyncio.timeout(30):
        answer = await stream.read()
    assert isinstance(answer, pb.IsActiveResponse), "the stream ended"
    return answer.result


async def test_keda_is_answered_with_held_values_through_an_outage(
    kube: FakeKubeAPIServer, outage: Outage, level: Level, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    clock = Clock()
    keda = KedaSettings("127.0.0.1:0", stream_interval=0.1)
    settings = settings_for(
        outage.url, kube.kubeconfig(tmp_path / "kubeconfig"), cache_ttl=0.0, backend_failure_hold=HOLD, keda=keda
    )
    adapter = await make_adapter(settings, clock=clock)
    async with scaler(adapter) as stub:
        assert (await stub.IsActive(ref(TRIGGER))).result is True
        assert await metric(stub, TRIGGER) == 180  # trainer-0 and trainer-1
        stream = stub.StreamIsActive(ref(TRIGGER))
        assert await next_activity(stream) is True

        outage.kill()
        level.value = "10"
        clock.advance(30)
        assert (await stub.IsActive(ref(TRIGGER))).result is True
        assert await metric(stub, TRIGGER) == 180
        # a stream opened during the outage starts from the held value instead of ending UNAVAILABLE
        during = stub.StreamIsActive(ref(TRIGGER))
        assert await next_activity(during) is True
        during.cancel()
        assert await unavailable(stub.IsActive(ref({**TRIGGER, "labelSelector": "app=other"})))
        # IsActive and GetMetrics at least; the streams share their question's answers (adapter/keda/questions.py)
        assert (gauge(adapter, "held_answers_served_total", api="custom") or 0) >= 2

        clock.advance(HOLD - 30)
        assert await unavailable(stub.IsActive(ref(TRIGGER)))
        request = pb.GetMetricsRequest(scaledObjectRef=ref(TRIGGER), metricName="gpu_utilization")
        assert await unavailable(stub.GetMetrics(request))

        outage.start()
        # the stream open throughout hears the fresh value once Prometheus answers again
        assert await next_activity(stream) is False
        assert await metric(stub, TRIGGER) == 20
        stream.cancel()
