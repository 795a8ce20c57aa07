"""Hostile requests to KEDA's external scaler, over real gRPC: values as long as a call may carry are refused with
INVALID_ARGUMENT and a short message."""

from __future__ import annotations

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
