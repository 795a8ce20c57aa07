"""Hostile requests to KEDA's external scaler, over real gRPC: values as long as a call may carry and bytes that are
not protobuf are refused with INVALID_ARGUMENT and a short message, and logged at a bounded rate."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc
import pytest

from adapter.app import KEDA
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.settings import KedaSettings
from harness.adapter.in_process import Adapter, settings_for
from harness.processes import free_port

MakeAdapter = Callable[..., Awaitable[Adapter]]
TRAINERS = {"metricName": "gpu_utilization", "labelSelector": "app=trainer", "targetValue": "60"}
# the red team's value: 30,000 digits and an "x" held the event loop 18 s; 60,000 is near the 64 KiB a call carries
DIGITS = "1" * 30_000 + "x"
LONGEST = "1" * 60_000 + "x"
SHORT = 400  # a refusal names the key and quotes at most a cut of the value
SERVICE = "/externalscaler.ExternalScaler/"
RAW = (None, None)  # no serializers: the bytes go out as they are, and come back as bytes


@pytest.fixture
async def channel(make_adapter: MakeAdapter) -> AsyncIterator[grpc.aio.Channel]:
    # every refusal here comes before a question reaches Prometheus: none needs to run
    adapter = await make_adapter(
        settings_for(f"http://127.0.0.1:{free_port()}", None, keda=KedaSettings("127.0.0.1:0"))
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{adapter.client.app[KEDA].port}") as channel:
        yield channel


def ref(metadata: Mapping[str, str], namespace: str = "ml") -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="scaled", namespace=namespace, scalerMetadata=metadata)


async def refused(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value


@pytest.mark.parametrize(
    ("scaled", "said"),
    [
        (ref({**TRAINERS, "targetValue": DIGITS}), "scalerMetadata: targetValue '1111"),
        (ref({**TRAINERS, "targetValue": LONGEST}), "scalerMetadata: targetValue '1111"),
        (ref({**TRAINERS, "activationValue": DIGITS}), "scalerMetadata: activationValue '1111"),
        (ref({**TRAINERS, "metricName": "g" * 60_000}), "scalerMetadata: metricName 'ggg"),
        (ref({**TRAINERS, "metricType": "p" * 60_000}), "scalerMetadata: metricType 'ppp"),
        (ref({**TRAINERS, "labelSelector": "a=b," * 15_000}), "scalerMetadata: labelSelector 'a=b,"),
        (ref({**TRAINERS, "k" * 60_000: "1"}), "scalerMetadata: unknown key 'kkk"),
        (ref(TRAINERS, "n" * 60_000), "scaledObjectRef.namespace 'nnn"),
    ],
    ids=["target", "target-64k", "activation", "metricName", "metricType", "selector", "key", "namespace"],
)
async def test_a_value_as_long_as_a_call_carries_is_invalid_argument_with_a_short_message(
    channel: grpc.aio.Channel, scaled: pb.ScaledObjectRef, said: str
) -> None:
    stub: Any = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
    for call in (
        stub.IsActive(scaled),
        stub.GetMetricSpec(scaled),
        stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=scaled, metricName="gpu_utilization")),
        anext(aiter(stub.StreamIsActive(scaled))),
    ):
        # before, the whole value came back: over grpcio's 8 KiB for a trailer, RESOURCE_EXHAUSTED
        error = await refused(call)
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
        details = str(error.details())
        assert said in details
        assert len(details) < SHORT, details


async def test_a_long_metric_name_asked_for_is_quoted_cut(channel: grpc.aio.Channel) -> None:
    stub: Any = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
    request = pb.GetMetricsRequest(scaledObjectRef=ref(TRAINERS), metricName="m" * 60_000)
    error = await refused(stub.GetMetrics(request))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "metricName 'mmm" in str(error.details())
    assert len(str(error.details())) < SHORT


@pytest.mark.parametrize(
    ("method", "message", "streams"),
    [
        ("IsActive", "externalscaler.ScaledObjectRef", False),
        ("GetMetricSpec", "externalscaler.ScaledObjectRef", False),
        ("GetMetrics", "externalscaler.GetMetricsRequest", False),
        ("StreamIsActive", "externalscaler.ScaledObjectRef", True),
        ("StreamMetricSpec", "externalscaler.ScaledObjectRef", True),
    ],
)
@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xff\xff",  # a field number past protobuf's range
        b"\x0a\x05ab",  # a string field longer than the bytes left
        b"\x12\x02\xff\xfe",  # ScaledObjectRef.namespace (or GetMetricsRequest's ref): not UTF-8
    ],
    ids=["tag", "length", "utf8"],
)
async def test_bytes_that_are_not_the_message_are_invalid_argument(
    channel: grpc.aio.Channel, method: str, message: str, streams: bool, data: bytes
) -> None:
    call: Awaitable[Any]
    if streams:
        call = anext(aiter(channel.unary_stream(SERVICE + method, *RAW)(data)))
    else:
        call = channel.unary_unary(SERVICE + method, *RAW)(data)
    error = await refused(call)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()  # before: UNKNOWN
    assert f"the request is not an {message} message: " in str(error.details())


async def test_malformed_calls_are_logged_at_a_bounded_rate_without_tracebacks(
    channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    is_active = channel.unary_unary(SERVICE + "IsActive", *RAW)
    for _ in range(200):
        assert (await refused(is_active(b"\xff\xff\xff"))).code() is grpc.StatusCode.INVALID_ARGUMENT
    # before: 200 tracebacks from grpc's own logger, 750 bytes each
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.name.startswith("grpc")]
    said = [r.getMessage() for r in caplog.records if r.name == "adapter.keda.scaler"]
    assert said == [
        "IsActive: the request is not an externalscaler.ScaledObjectRef message: Error parsing message with "
        "type 'externalscaler.ScaledObjectRef': Wire format was corrupt"
    ]
