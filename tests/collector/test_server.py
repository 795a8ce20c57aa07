import pynvml
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from pytest_aiohttp import AiohttpClient

from collector.collection import Collection
from collector.nvml.reader import NvmlReader
from collector.server import create_app
from harness.node.nvml_trace import ReplayNvml


async def test_metrics_in_text_and_openmetrics(aiohttp_client: AiohttpClient, h200: ReplayNvml) -> None:
    collection = Collection(NvmlReader(h200), None)
    collection.run_once()
    client = await aiohttp_client(create_app(collection))
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in await resp.text()
    resp = await client.get("/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0"})
    assert resp.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    names = {f.name for f in parse_openmetrics(await resp.text())}  # type: ignore[no-untyped-call]
    assert "DCGM_FI_DEV_GPU_UTIL" in names
    resp = await client.get("/health")
    assert resp.status == 200


async def test_health_is_503_with_the_reason_while_nvml_is_down(aiohttp_client: AiohttpClient) -> None:
    nvml = ReplayNvml.load("h200")
    nvml.fail("nvmlInit", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    collection = Collection(NvmlReader(nvml), None)
    collection.run_once()
    client = await aiohttp_client(create_app(collection))
    resp = await client.get("/health")
    assert resp.status == 503
    assert "NVML did not start: LibraryNotFound" in await resp.text()
    resp = await client.get("/metrics")  # still answers, with the collector's own series
    assert resp.status == 200
    assert "gpuscale_collector_nvml_up 0" in await resp.text()
    assert (await client.get("/nope")).status == 404
