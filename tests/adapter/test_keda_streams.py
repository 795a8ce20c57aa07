"""StreamIsActive: the activity, then each change of it, across the activation value both ways; many streams at once,
each closed by its client, leave nothing running; one stream past --keda-max-streams, or past a namespace's share, is
refused; streams asking one question share its queries."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from adapter.app import KEDA
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.settings import KedaSettings
from adapter.settings import parse_settings
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.exporter import GPU, Exporter, exposition
from harness.stores.prometheus import Prometheus, run_prometheus
from harness.stores.proxy import PrometheusProxy
from harness.waiting import eventually, wait_until

pytestmark = pytest.mark.prometheus

MakeAdapter = Callable[..., Awaitable[Adapter]]
# one engine's GPU in namespace llm, whose utilization the test moves; the external metric is its average
QUEUE = {"metricName": "gpu_utilization", "metricType": "external", "targetValue": "50", "activationValue": "50"}
TRAINERS = {"metricName": "gpu_utilization", "labelSelector": "app=trainer", "targetValue": "60"}
PROMETHEUS_DOWN = json.dumps({"status": "error", "errorType": "unavailable", "error": "down for the test"}).encode()
ANSWER_WITHIN = 15.0  # a scrape a second, then a stream's next look


class Level:
    """The exporter's page: one GPU at ``value``, read at every scrape."""

    def __init__(self) -> None:
        self.value = "10"

    def text(self) -> str:
        labels = {"gpu": "0", "UUID": "GPU-m0", "Hostname": "node-m", "pod": "engine-0", "namespace": "llm"}
        return exposition([(GPU, labels, self.value)])


@pytest.fixture(scope="module")
def moving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Level]]:
    level = Level()
    with Exporter(level.text) as exporter, run_prometheus(tmp_path_factory.mktemp("moving"), [exporter.target]) as p:
        p.wait_for(GPU)
        yield p, level


def ref(metadata: dict[str, str], namespace: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="scaled", namespace=namespace, scalerMetadata=metadata)


@contextlib.asynccontextmanager
async def scaler(adapter: Adapter) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{adapter.client.app[KEDA].port}") as channel:
        yield pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]


async def next_activity(stream: Any) -> bool:
    async with asyncio.timeout(ANSWER_WITHIN):
        answer = await stream.read()
    assert isinstance(answer, pb.IsActiveResponse), "the stream ended"
    return answer.result


async def test_a_stream_follows_the_value_across_the_activation_value_both_ways(
    moving: tuple[Prometheus, Level], make_adapter: MakeAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "adapter.keda")
    prometheus, level = moving
    proxy = PrometheusProxy(prometheus.url)
    await proxy.start()
    try:
        adapter = await make_adapter(
            settings_for(proxy.url, None, keda=KedaSettings("127.0.0.1:0", stream_interval=0.1))
        )
        async with scaler(adapter) as stub:
            level.value = "10"
            await wait_until(lambda: prometheus.query(GPU)[0]["value"][1] == "10", what="the scrape of 10")
            stream = stub.StreamIsActive(ref(QUEUE, "llm"))
            assert await next_activity(stream) is False
            level.value = "90"
            # each answer is a change: a stream that repeated itself would answer False here
            assert await next_activity(stream) is True
            level.value = "10"
            assert await next_activity(stream) is False

            # Prometheus down after the first answer: the stream stays open and silent, the polled call says why,
            # and the change made meanwhile arrives once Prometheus answers again
            proxy.respond = (503, PROMETHEUS_DOWN)

            async def unavailable() -> bool:  # once the query cache lets the last answer go
                try:
                    await stub.IsActive(ref(QUEUE, "llm"))
                except grpc.aio.AioRpcError as e:
                    return e.code() is grpc.StatusCode.UNAVAILABLE
                return False

            await eventually(unavailable, what="IsActive to say Prometheus is down")
            level.value = "90"
            await wait_until(lambda: prometheus.query(GPU)[0]["value"][1] == "90", what="the scrape of 90")
            await wait_until(  # a look of the stream's has failed (a fixed 0.5 s could end before its query did)
                lambda: any(r.getMessage().startswith("StreamIsActive llm/") for r in caplog.records),
                what="the stream to say Prometheus is down",
            )
            proxy.respond = None
            assert await next_activity(stream) is True
            said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("StreamIsActive")]
            assert said[0].startswith("StreamIsActive llm/gpu_utilization: Prometheus ")
            assert said[0].endswith("; its streams wait for values")
            assert said[1:] == ["StreamIsActive llm/gpu_utilization: values are back"]
            stream.cancel()
            await wait_until(lambda: adapter.client.app[KEDA].scaler.open_streams == 0, what="the stream to end")
    finally:
        level.value = "10"
        await proxy.close()


@pytest.fixture
async def few_streams(
    kube: FakeKubeAPIServer, prometheus: Prometheus, make_adapter: MakeAdapter, tmp_path: Path
) -> Adapter:
    keda = KedaSettings("127.0.0.1:0", stream_interval=0.1, max_streams=50)
    return await make_adapter(settings_for(prometheus.adapter_url, kube.kubeconfig(tmp_path / "kubeconfig"), keda=keda))


async def test_fifty_streams_closed_by_their_clients_leave_nothing_running(few_streams: Adapter) -> None:
    server = few_streams.client.app[KEDA]
    metrics = few_streams.components.metrics
    async with scaler(few_streams) as stub:
        assert (await stub.IsActive(ref(TRAINERS, "ml"))).result  # the channel is up: its own tasks are counted
        before = len(asyncio.all_tasks())
        streams = [stub.StreamIsActive(ref(TRAINERS, "ml")) for _ in range(50)]
        assert await asyncio.gather(*map(next_activity, streams)) == [True] * 50
        assert server.scaler.open_streams == 50
        assert metrics.registry.get_sample_value("gpuscale_adapter_keda_streams") == 50
        assert len(asyncio.all_tasks()) >= before + 50

        # one more than --keda-max-streams is refused, and the fifty go on
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await next_activity(stub.StreamIsActive(ref(TRAINERS, "ml")))
        assert e.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "50 StreamIsActive streams are open, the most --keda-max-streams allows" in str(e.value.details())

        for stream in streams:
            stream.cancel()
        await wait_until(lambda: server.scaler.open_streams == 0, what="every stream to end")
        await wait_until(lambda: len(asyncio.all_tasks()) <= before, what="the streams' tasks to end")
        assert metrics.registry.get_sample_value("gpuscale_adapter_keda_streams") == 0
        cancelled = {"method": "StreamIsActive", "code": "CANCELLED"}
        assert metrics.registry.get_sample_value("gpuscale_adapter_keda_requests_total", cancelled) == 50
        # and a stream may be opened again
        assert await next_activity(stub.StreamIsActive(ref(TRAINERS, "ml"))) is True


@pytest.fixture
async def two_streams_slow_prometheus(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> Adapter:
    keda = KedaSettings("127.0.0.1:0", stream_interval=0.1, max_streams=2)
    settings = settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"), keda=keda, cache_ttl=0.0)
    return await make_adapter(settings)


async def test_the_stream_limit_leaves_unary_calls_alone(
    two_streams_slow_prometheus: Adapter, proxy: PrometheusProxy
) -> None:
    proxy.delay = 0.5  # ten ScaledObjects polled at once, each waiting on Prometheus
    async with scaler(two_streams_slow_prometheus) as stub:
        open_streams = [stub.StreamIsActive(ref(TRAINERS, "ml")) for _ in range(2)]
        assert await asyncio.gather(*map(next_activity, open_streams)) == [True, True]
        answers = await asyncio.gather(*(stub.IsActive(ref(TRAINERS, "ml")) for _ in range(10)))
        assert [answer.result for answer in answers] == [True] * 10
        for stream in open_streams:
            stream.cancel()


async def test_stopping_ends_streams_with_ok_while_their_values_are_being_asked(
    two_streams_slow_prometheus: Adapter, proxy: PrometheusProxy
) -> None:
    server = two_streams_slow_prometheus.client.app[KEDA]
    async with scaler(two_streams_slow_prometheus) as stub:
        streams = [stub.StreamIsActive(ref(TRAINERS, "ml")) for _ in range(2)]
        assert await asyncio.gather(*map(next_activity, streams)) == [True, True]
        asked = proxy.count("/api/v1/query")
        proxy.delay = 30.0  # each stream's next look waits on Prometheus when the server stops
        await wait_until(lambda: proxy.count("/api/v1/query") > asked, what="a look held at Prometheus")
        await server.stop()
        for stream in streams:
            assert await stream.read() is grpc.aio.EOF  # type: ignore[attr-defined]
            assert await stream.code() is grpc.StatusCode.OK  # KEDA opens it again at once, not after a back-off


@pytest.fixture
async def counted(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> Adapter:
    # no query cache, and a stream's question asked again only after a minute: every query the proxy counts was
    # asked for a stream that opened
    keda = KedaSettings("127.0.0.1:0", stream_interval=60.0)
    settings = settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"), keda=keda, cache_ttl=0.0)
    return await make_adapter(settings)


async def test_streams_asking_one_question_share_its_queries(counted: Adapter, proxy: PrometheusProxy) -> None:
    scaler_ = counted.client.app[KEDA].scaler
    async with scaler(counted) as stub:
        before = proxy.count("/api/v1/query")
        first = stub.StreamIsActive(ref(TRAINERS, "ml"))
        assert await next_activity(first) is True
        one = proxy.count("/api/v1/query") - before
        assert one >= 1
        # twenty more, one after another, the activation value differing: each compares the one value on its own
        streams = [first]
        for n in range(20):
            stream = stub.StreamIsActive(ref({**TRAINERS, "activationValue": "1e9" if n % 2 else "0"}, "ml"))
            assert await next_activity(stream) is (n % 2 == 0)
            streams.append(stream)
        # before, each stream asked on its own: 21 times the queries of one
        assert proxy.count("/api/v1/query") - before == one
        assert len(scaler_.questions) == 1
        # another selector is another question
        other = stub.StreamIsActive(ref({**TRAINERS, "labelSelector": "app in (trainer,other)"}, "ml"))
        assert await next_activity(other) is True
        assert proxy.count("/api/v1/query") - before > one
        assert len(scaler_.questions) == 2
        for stream in [*streams, other]:
            stream.cancel()
        await wait_until(lambda: len(scaler_.questions) == 0, what="the questions to be dropped")


async def test_one_namespace_takes_at_most_its_share_of_the_streams(
    kube: FakeKubeAPIServer, prometheus: Prometheus, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    flags = ["--keda-scaler-address=127.0.0.1:0", "--keda-stream-interval=100ms", "--keda-max-streams-per-namespace=2"]
    keda = parse_settings(flags, env={"GPUSCALE_ADAPTER_PROMETHEUS_URL": prometheus.adapter_url}).keda
    adapter = await make_adapter(
        settings_for(prometheus.adapter_url, kube.kubeconfig(tmp_path / "kubeconfig"), keda=keda)
    )
    server = adapter.client.app[KEDA]
    serving = {"metricName": "gpu_utilization", "targetValue": "1"}
    async with scaler(adapter) as stub:
        # distinct selectors: distinct questions, each a query a tick
        ml = [stub.StreamIsActive(ref({**TRAINERS, "labelSelector": s}, "ml")) for s in ("app=trainer", "app")]
        assert await asyncio.gather(*map(next_activity, ml)) == [True, True]
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await next_activity(stub.StreamIsActive(ref(TRAINERS, "ml")))
        assert e.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert e.value.details() == (
            "2 StreamIsActive streams of namespace ml are open, the most --keda-max-streams-per-namespace allows"
        )
        # the other namespaces' places are theirs
        assert await next_activity(stub.StreamIsActive(ref(serving, "serving"))) is True
        ml[0].cancel()
        await wait_until(lambda: server.scaler.streams_of["ml"] == 1, what="the ml stream to end")
        assert await next_activity(stub.StreamIsActive(ref(TRAINERS, "ml"))) is True
