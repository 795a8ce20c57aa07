"""KEDA's external scaler through a gRPC client generated from the .proto, over TCP, against a real Prometheus: the
values are the HTTP APIs' answers to the same question, a namespace reads only its own, errors are status codes."""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from decimal import Decimal
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
from harness.kube.wire import parse_quantity
from harness.processes import free_port
from harness.stores.prometheus import Prometheus
from harness.stores.proxy import PrometheusProxy

pytestmark = pytest.mark.prometheus

MakeAdapter = Callable[..., Awaitable[Adapter]]
LOCAL = KedaSettings("127.0.0.1:0", stream_interval=0.1)
TRAINERS = {"metricName": "gpu_utilization", "labelSelector": "app=trainer", "targetValue": "60"}


def ref(metadata: Mapping[str, str], namespace: str = "ml") -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="scaled", namespace=namespace, scalerMetadata=metadata)


def stub_for(channel: grpc.aio.Channel) -> Any:
    return pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]


async def metric_value(stub: Any, scaled: pb.ScaledObjectRef) -> float:
    name = scaled.scalerMetadata["metricName"]
    answer = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=scaled, metricName=name))
    [value] = answer.metricValues
    assert value.metricName == name
    return float(value.metricValueFloat)


async def refused(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value


@pytest.fixture
async def served(kube: FakeKubeAPIServer, prometheus: Prometheus, make_adapter: MakeAdapter, tmp_path: Path) -> Adapter:
    settings = settings_for(prometheus.adapter_url, kube.kubeconfig(tmp_path / "kubeconfig"), keda=LOCAL)
    return await make_adapter(settings)


@pytest.fixture
async def stub(served: Adapter) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{served.client.app[KEDA].port}") as channel:
        yield stub_for(channel)


def http_question(namespace: str, metadata: Mapping[str, str]) -> str:
    """The HTTP request a trigger's metadata stands for, written out here rather than by ``ScalerQuery.path``, the
    code under test: the pods' values in the custom metrics API, or the external metric."""
    name = metadata["metricName"]
    if metadata.get("metricType") == "external":
        path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{name}"
    else:
        path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/pods/*/{name}"
    selector = metadata.get("labelSelector")
    return f"{path}?{urllib.parse.urlencode({'labelSelector': selector})}" if selector else path


async def http_sum(adapter: Adapter, path: str) -> Decimal:
    """What the HTTP API answers to the same question, its items summed with the harness's own quantity reader."""
    items = (await adapter.get(path))["items"]
    assert items, path
    return sum((parse_quantity(item["value"]) for item in items), Decimal(0))


@pytest.mark.parametrize(
    ("namespace", "metadata", "expected"),
    [
        ("ml", TRAINERS, Decimal("128")),  # trainer-0 (95.5 and 80.5 → 88) and trainer-1 (40)
        # every pod of ml: the trainers, other-0, the two shares; broken-0 reads NaN and is left out, as over HTTP
        ("ml", {"metricName": "gpu_utilization", "targetValue": "60"}, Decimal("226")),
        ("ml", {**TRAINERS, "metricName": "gpu_memory_used"}, None),
        ("ml", {"metricName": "gpu_memory_used", "metricType": "external", "targetValue": "60"}, None),
        ("serving", {"metricName": "gpu_memory_used", "metricType": "external", "targetValue": "1"}, Decimal(8192)),
        ("serving", {"metricName": "gpu_utilization", "targetValue": "1"}, Decimal(70)),  # infer-0, exported labels
    ],
)
async def test_values_equal_the_http_apis_answers(
    served: Adapter, stub: Any, namespace: str, metadata: dict[str, str], expected: Decimal | None
) -> None:
    over_http = await http_sum(served, http_question(namespace, metadata))
    assert expected in (None, over_http)
    scaled = ref(metadata, namespace)
    assert await metric_value(stub, scaled) == float(over_http)
    assert (await stub.IsActive(scaled)).result is True


async def test_the_metric_spec_is_the_target(stub: Any) -> None:
    answer = await stub.GetMetricSpec(ref({**TRAINERS, "targetValue": "2.5"}))
    [spec] = answer.metricSpecs
    assert (spec.metricName, spec.targetSizeFloat, spec.targetSize) == ("gpu_utilization", 2.5, 3)


@pytest.mark.parametrize(("activation", "active"), [("0", True), ("127.999", True), ("128", False), ("1e9", False)])
async def test_active_is_the_value_above_the_activation_value(stub: Any, activation: str, active: bool) -> None:
    assert (await stub.IsActive(ref({**TRAINERS, "activationValue": activation}))).result is active


@pytest.mark.parametrize("method", ["IsActive", "GetMetricSpec", "GetMetrics", "StreamIsActive"])
@pytest.mark.parametrize(
    ("namespace", "metadata", "code", "message"),
    [
        ("ml", {"targetValue": "60"}, "INVALID_ARGUMENT", "scalerMetadata: metricName is required"),
        ("ml", {**TRAINERS, "targetValue": "0"}, "INVALID_ARGUMENT", "targetValue '0' must be from 0.001 to"),
        ("ml", {**TRAINERS, "metricType": "Value"}, "INVALID_ARGUMENT", "metricType 'Value' is not pods or external"),
        ("ml", {**TRAINERS, "labelSelector": "app in"}, "INVALID_ARGUMENT", "scalerMetadata labelSelector"),
        ("ml", {**TRAINERS, "activationValue": "x"}, "INVALID_ARGUMENT", "activationValue 'x' is not a number"),
        ("ml", {**TRAINERS, "namespace": "serving"}, "INVALID_ARGUMENT", "unknown key 'namespace'"),
        ("", TRAINERS, "INVALID_ARGUMENT", "scaledObjectRef.namespace '' is not a namespace name"),
        ("ML", TRAINERS, "INVALID_ARGUMENT", "scaledObjectRef.namespace 'ML' is not a namespace name"),
    ],
)
async def test_a_missing_or_bad_key_is_invalid_argument_naming_it(
    stub: Any, method: str, namespace: str, metadata: dict[str, str], code: str, message: str
) -> None:
    error = await refused(call(stub, method, ref(metadata, namespace)))
    assert error.code().name == code
    assert message in str(error.details())


def call(stub: Any, method: str, scaled: pb.ScaledObjectRef) -> Awaitable[Any]:
    """One call of ``method``; a stream's first answer."""
    answer: Awaitable[Any]
    if method == "GetMetrics":
        name = scaled.scalerMetadata.get("metricName", "")
        answer = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=scaled, metricName=name))
    elif method == "StreamIsActive":
        answer = anext(aiter(stub.StreamIsActive(scaled)))
    else:
        answer = getattr(stub, method)(scaled)
    return answer


@pytest.mark.parametrize("method", ["IsActive", "GetMetrics", "StreamIsActive"])
@pytest.mark.parametrize(
    ("namespace", "metadata", "message"),
    [
        ("ml", {**TRAINERS, "metricName": "nope"}, "the server could not find the metric nope for pods"),
        (
            "ml",
            {**TRAINERS, "metricName": "nope", "metricType": "external"},
            "the server could not find the external metric nope (the same question over HTTP: "
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/nope?labelSelector=app%3Dtrainer)",
        ),
        ("ml", {**TRAINERS, "labelSelector": "app=nothing"}, "no pod matching app=nothing in namespace ml has a "),
        # the average over ml's GPUs is NaN (broken-0): no value, as the HTTP API answers no item
        (
            "ml",
            {"metricName": "gpu_utilization", "metricType": "external", "targetValue": "1"},
            "no series in namespace ml has a value of gpu_utilization",
        ),
    ],
)
async def test_a_metric_that_does_not_exist_is_not_found(
    stub: Any, method: str, namespace: str, metadata: dict[str, str], message: str
) -> None:
    error = await refused(call(stub, method, ref(metadata, namespace)))
    assert error.code() is grpc.StatusCode.NOT_FOUND
    assert message in str(error.details())


async def test_metrics_are_asked_by_the_name_the_spec_gave(stub: Any) -> None:
    request = pb.GetMetricsRequest(scaledObjectRef=ref(TRAINERS), metricName="s0-gpu_utilization")
    error = await refused(stub.GetMetrics(request))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "metricName 's0-gpu_utilization' is not the trigger's scalerMetadata metricName" in str(error.details())


async def test_the_target_is_not_streamed(stub: Any) -> None:
    error = await refused(anext(aiter(stub.StreamMetricSpec(ref(TRAINERS)))))
    assert error.code() is grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(
    ("namespace", "metadata"),
    [
        # the trainers live in ml: from serving their label selects nothing
        ("serving", TRAINERS),
        ("serving", {**TRAINERS, "labelSelector": "app in (trainer,other,share)"}),
        # a selector on the series' namespace labels cannot widen an external query past the caller's namespace
        ("ml", {"metricName": "gpu_memory_used", "metricType": "external", "targetValue": "1",
                "labelSelector": "exported_namespace=serving"}),
        ("ml", {"metricName": "gpu_utilization", "metricType": "external", "targetValue": "1",
                "labelSelector": "namespace=serving"}),
        # a metric name is a name, not a path
        ("serving", {**TRAINERS, "metricName": "../../ml/pods/*/gpu_utilization"}),
        ("serving", {**TRAINERS, "metricName": "gpu_utilization?namespace=ml"}),
    ],
)  # fmt: skip
async def test_a_namespace_reads_nothing_of_another_namespaces_pods(
    stub: Any, namespace: str, metadata: dict[str, str]
) -> None:
    for method in ("IsActive", "GetMetrics"):
        error = await refused(call(stub, method, ref(metadata, namespace)))
        assert error.code() is grpc.StatusCode.NOT_FOUND, error.details()


async def test_one_provider_answers_http_and_grpc_from_one_cache(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    settings = settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"), keda=LOCAL, cache_ttl=60.0)
    adapter = await make_adapter(settings)
    path = http_question("ml", TRAINERS)
    await adapter.get(path)
    queries = proxy.count("/api/v1/query")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{adapter.client.app[KEDA].port}") as channel:
        stub = stub_for(channel)
        await asyncio.gather(*(metric_value(stub, ref(TRAINERS)) for _ in range(5)))
        assert (await stub.IsActive(ref(TRAINERS))).result
    assert proxy.count("/api/v1/query") == queries


async def test_prometheus_down_is_unavailable(make_adapter: MakeAdapter, caplog: pytest.LogCaptureFixture) -> None:
    adapter = await make_adapter(settings_for(f"http://127.0.0.1:{free_port()}", None, keda=LOCAL))
    external = {"metricName": "gpu_utilization", "metricType": "external", "targetValue": "60"}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{adapter.client.app[KEDA].port}") as channel:
        stub = stub_for(channel)
        for method in ("IsActive", "GetMetrics", "StreamIsActive"):
            error = await refused(call(stub, method, ref(external)))
            assert error.code() is grpc.StatusCode.UNAVAILABLE
            assert error.details() == "the metrics backend (Prometheus) is currently unavailable"
    assert "Traceback" not in caplog.text


async def test_plain_grpc_without_client_certificates_is_said_at_start(
    caplog: pytest.LogCaptureFixture, served: Adapter
) -> None:
    records = caplog.get_records("setup")
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING and "KEDA" in r.getMessage()]
    port = served.client.app[KEDA].port
    assert warnings == [
        f"KEDA's external scaler on 127.0.0.1:{port} takes calls without client certificates and in plain text "
        "(--insecure-serve-http): anyone who reaches the port can read the metrics of every namespace through it "
        "(give --keda-client-ca-file, and KEDA's TriggerAuthentication the client certificate)"
    ]


async def test_a_client_ca_given_with_plain_grpc_is_said_to_be_unused(
    caplog: pytest.LogCaptureFixture, prometheus: Prometheus, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    keda = KedaSettings("127.0.0.1:0", client_ca_file=tmp_path / "clients.pem")
    await make_adapter(settings_for(prometheus.adapter_url, None, keda=keda))
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "KEDA" in r.getMessage()]
    unused = f"--keda-client-ca-file {tmp_path / 'clients.pem'} is not used without TLS"
    assert f"(--insecure-serve-http), {unused}" in warning


async def test_stopping_ends_the_streams_cleanly(served: Adapter, stub: Any) -> None:
    stream = stub.StreamIsActive(ref(TRAINERS))
    assert (await anext(aiter(stream))).result is True
    await served.client.app[KEDA].stop()
    assert [answer async for answer in stream] == []  # ended with OK: KEDA opens it again at once
    assert await stream.code() is grpc.StatusCode.OK
