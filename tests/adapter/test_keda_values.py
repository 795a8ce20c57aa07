"""What KEDA is handed at the edges of its numbers, through the real gRPC server and a real Prometheus: sums past
float64, values and targets past the int64 thousandths KEDA converts them to, exponents past any range, and the
metric name in the case the HPA asks it in."""

from __future__ import annotations

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
from harness.stores.exporter import Exporter, exposition
from harness.stores.prometheus import Prometheus, run_prometheus

pytestmark = pytest.mark.prometheus

MakeAdapter = Callable[..., Awaitable[Adapter]]
LARGEST = (2**63 - 1) / 1000  # KEDA hands values and targets on as int64 thousandths
SERIES = [
    ("Huge_Demand", {"pod": "a-0", "namespace": "ns"}, "1.5e308"),  # each within float64, their sum not
    ("Huge_Demand", {"pod": "a-1", "namespace": "ns"}, "1.5e308"),
    ("large_demand", {"pod": "a-0", "namespace": "ns"}, "12345678901234567890"),
    ("large_demand", {"pod": "a-0", "namespace": "other"}, "-12345678901234567890"),
]
RULES = """
externalRules:
- seriesQuery: '{__name__=~"Huge_Demand|large_demand",namespace!=""}'
  resources:
    overrides: {namespace: {resource: namespace}}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (pod)'
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with Exporter(exposition(SERIES)) as exporter, run_prometheus(tmp_path_factory.mktemp("edges"),
                                                                 [exporter.target]) as prometheus:  # fmt: skip
        prometheus.wait_for("Huge_Demand", min_results=2)
        prometheus.wait_for("large_demand", min_results=2)
        yield prometheus


@pytest.fixture
async def stub(store: Prometheus, make_adapter: MakeAdapter, tmp_path: Path) -> AsyncIterator[Any]:
    (tmp_path / "rules.yaml").write_text(RULES)
    settings = settings_for(store.url, None, config=tmp_path / "rules.yaml", keda=KedaSettings("127.0.0.1:0"))
    adapter = await make_adapter(settings)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{adapter.client.app[KEDA].port}") as channel:
        yield pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]


def ref(metric: str, namespace: str = "ns", **more: str) -> pb.ScaledObjectRef:
    metadata = {"metricName": metric, "metricType": "external", "targetValue": "1", **more}
    return pb.ScaledObjectRef(name="so", namespace=namespace, scalerMetadata=metadata)


async def metric(stub: Any, scaled: pb.ScaledObjectRef, name: str) -> pb.MetricValue:
    answer: pb.GetMetricsResponse = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=scaled, metricName=name))
    [value] = answer.metricValues
    return value


@pytest.mark.parametrize(
    ("metric_name", "namespace", "value"),
    [("Huge_Demand", "ns", LARGEST), ("large_demand", "ns", LARGEST), ("large_demand", "other", -LARGEST)],
)
async def test_values_past_what_keda_can_hand_on_are_the_largest_it_can(
    stub: Any, metric_name: str, namespace: str, value: float
) -> None:
    # a sum past float64 would be +Inf, which KEDA reads as 0; past int64 thousandths, KEDA's conversion overflows
    answer = await metric(stub, ref(metric_name, namespace), metric_name)
    assert answer.metricValueFloat == pytest.approx(value)
    assert answer.metricValue == pytest.approx(value, abs=1)


async def test_the_metric_is_asked_in_the_case_the_hpa_asks_it_in(stub: Any) -> None:
    # the HPA lowercases an external metric's name and KEDA matches names ignoring case, then asks in lower case
    answer = await metric(stub, ref("Huge_Demand"), "huge_demand")
    assert answer.metricName == "huge_demand"
    assert answer.metricValueFloat == pytest.approx(LARGEST)


@pytest.mark.parametrize(
    ("more", "message"),
    [
        ({"targetValue": "1e16"}, "targetValue '1e16' must be from 0.001 to 9223372036854775.807"),
        ({"targetValue": "1e99999999999999999999"}, "targetValue '1e99999999999999999999' is beyond float64's range"),
        ({"activationValue": "-1e99999999999999999999"}, "is beyond float64's range"),
        ({"targetValue": "\u0665"}, "targetValue '\u0665' is not a number"),  # a digit, but not an ASCII one
    ],
)
@pytest.mark.parametrize("method", ["GetMetricSpec", "IsActive"])
async def test_numbers_past_any_range_are_invalid_arguments_naming_the_key(
    stub: Any, more: dict[str, str], message: str, method: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await getattr(stub, method)(ref("large_demand", **more))
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in str(error.value.details())
    assert "Traceback" not in caplog.text
