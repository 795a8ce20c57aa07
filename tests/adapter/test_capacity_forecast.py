"""``inference_capacity_forecast``: yesterday's record of what arrived needed, read 24 hours back and 5 minutes
ahead (docs/adapter.md, "A forecast floor"). Yesterday is backfilled into a real Prometheus's storage with
promtool (``tsdb create-blocks-from openmetrics``) before it starts; today's record is a page it scrapes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from adapter.app import KEDA
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from harness.adapter.in_process import Adapter, MakeKedaAdapter
from harness.deploy.prometheus_files import promtool
from harness.stores.exporter import Exporter
from harness.stores.prometheus import Prometheus, run_prometheus

pytestmark = [pytest.mark.prometheus]

EM = "/apis/external.metrics.k8s.io/v1beta1"
RECORD = "namespace:inference_capacity_demand_replicas:sum"
DAY = 86_400
# today's records: daily and new have engines now; quiet (scaled to zero) and none have none
TODAY = f'{RECORD}{{namespace="daily"}} 2\n{RECORD}{{namespace="new"}} 1.5\n'


def yesterday(now: float) -> str:
    """Every 15 s from 10 minutes before this time yesterday to 10 after: daily needed 2 replicas' worth, 20.6 from
    2 to 4 minutes after this time (yesterday's burst), then 3; quiet needed 5 throughout."""
    lines = [f"# TYPE {RECORD} gauge"]
    start = int(now) - DAY - 600
    for namespace in ("daily", "quiet"):
        for t in range(start, start + 1200, 15):
            ahead = t - (now - DAY)
            value = 5.0 if namespace == "quiet" else 20.6 if 120 <= ahead <= 240 else 3.0 if ahead > 240 else 2.0
            lines.append(f'{RECORD}{{namespace="{namespace}"}} {value} {t}')
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    tmp = tmp_path_factory.mktemp("prometheus")
    history = tmp / "yesterday.om"
    history.write_text(yesterday(time.time()))
    done = promtool("tsdb", "create-blocks-from", "openmetrics", str(history), str(tmp / "prometheus-data"), cwd=tmp)
    assert done.returncode == 0, done.stderr
    with contextlib.ExitStack() as stack:
        page = stack.enter_context(Exporter(TODAY))
        prom = stack.enter_context(run_prometheus(tmp, [page.target]))
        prom.wait_for(f'{RECORD}{{namespace="new"}}')
        yield prom


@pytest.fixture
async def adapter(prometheus: Prometheus, make_keda_adapter: MakeKedaAdapter) -> Adapter:
    return await make_keda_adapter(prometheus.url, ("daily", "new", "quiet", "none"))


async def forecast(adapter: Adapter, namespace: str) -> list[str]:
    resp = await adapter.client.get(f"{EM}/namespaces/{namespace}/inference_capacity_forecast")
    body = await resp.json()
    assert resp.status == 200, body
    return [item["value"] for item in body["items"]]


async def test_the_floor_is_what_the_next_five_minutes_needed_yesterday(adapter: Adapter) -> None:
    # yesterday's burst (20.6 replicas' worth) comes 2 minutes after this time: the floor is there now, x 100
    assert await forecast(adapter, "daily") == ["2060"]


async def test_a_namespace_scaled_to_zero_gets_yesterdays_floor(adapter: Adapter) -> None:
    assert await forecast(adapter, "quiet") == ["500"]


async def test_no_yesterday_is_no_floor_but_still_a_value(adapter: Adapter) -> None:
    assert await forecast(adapter, "new") == ["0"]
    assert await forecast(adapter, "none") == []


async def test_through_keda(adapter: Adapter) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{adapter.client.app[KEDA].port}") as channel:
        stub: Any = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        metadata = {"metricName": "inference_capacity_forecast", "metricType": "external", "targetValue": "80"}
        quiet = pb.ScaledObjectRef(name="s", namespace="quiet", scalerMetadata=metadata)
        # a workload at zero wakes before yesterday's traffic comes back
        assert (await stub.IsActive(quiet)).result is True
        asked = pb.GetMetricsRequest(scaledObjectRef=quiet, metricName="inference_capacity_forecast")
        assert [v.metricValueFloat for v in (await stub.GetMetrics(asked)).metricValues] == [500]
