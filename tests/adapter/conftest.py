from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from adapter.app import create_app
from adapter.backends.auth_api import AuthAPI
from adapter.keda.settings import KedaSettings
from adapter.security import tls
from adapter.security.auth_config import AuthSettings
from adapter.settings import Settings
from common.freshness import DEFAULT_TIMING, Timing
from common.listener import Limits
from harness.adapter.in_process import Adapter, MakeKedaAdapter, MakeSecure, populate, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import Cluster, SecureAdapter, grant_cluster_roles
from harness.stores import engines, gateways
from harness.stores.exporter import FB, GPU, TENSOR, Exporter, exposition
from harness.stores.kinds import PROMETHEUS
from harness.stores.prometheus import Prometheus, run_prometheus
from harness.stores.proxy import PrometheusProxy
from harness.stores.victoria_metrics import VictoriaMetrics, run_victoria_metrics
from harness.waiting import eventually, wait_until

AiohttpClient = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]
AiohttpServer = Callable[..., Awaitable[TestServer]]
SERIES_AWAITED = (GPU, FB, TENSOR, "queue_depth", "weird_value", "big_value")
# the engines' pages, and a rate over two scrapes of each kind of counter: the inference metrics need both
ENGINE_SERIES_AWAITED = (
    '{__name__="vllm:num_requests_waiting"}',
    '{__name__="sglang:num_queue_reqs"}',
    "tgi_queue_size",
    "nv_inference_pending_request_count",
    "inference_extension_flow_control_queue_size",
    '{__name__="vllm:num_incoming_requests_total"}',
    'rate({__name__="vllm:time_to_first_token_seconds_count"}[1m]) > 0',
    "rate(nv_inference_request_success[1m]) > 0",
    "rate(tgi_request_count[1m]) > 0",
    "llm_d_epp_flow_control_pool_saturation",
    'rate({__name__=~"dynamo_frontend_time_to_first_token_seconds_count"}[1m]) > 0',
    'rate({__name__=~"nv_llm_http_service_inter_token_latency_seconds_count"}[1m]) > 0',
)


@pytest.fixture(scope="session")
def exporter() -> Iterator[Exporter]:
    with Exporter(exposition()) as e:
        yield e


@dataclass(frozen=True)
class EnginePages:
    """Each engine pod's /metrics by scrape target."""

    targets: dict[str, engines.EnginePod]


@pytest.fixture(scope="session")
def engine_pages() -> Iterator[EnginePages]:
    with contextlib.ExitStack() as stack:
        targets = {}
        for pod in [*engines.pods(), *gateways.pods()]:
            page = engines.Page(pod.page)
            targets[stack.enter_context(Exporter(page.text, pod.negotiate)).target] = pod
        yield EnginePages(targets)


@pytest.fixture
async def minute_of_engine_history(engine_pages: EnginePages, store: Prometheus) -> None:
    """Waits until the store holds over a minute of every engine page's scrapes: Prometheus's rate() over [1m] of a
    younger series divides what it saw by the whole minute, so it reads low (a rate of 3/s read 0.34 at 12 s). Each
    target's ``up`` is written from its first scrape on, as its counters are: once it has a sample older than the
    minute, so do they. (A fixed 65 s from when the pages were served was short whenever the store began scraping
    later.)"""
    up = 'up{job="gpuscale-inference-engines"}'
    older = f"count_over_time({up}[75s]) > count_over_time({up}[1m])"

    async def minute_scraped() -> bool:
        return len(await asyncio.to_thread(store.query, older)) == len(engine_pages.targets)

    await eventually(minute_scraped, within=120, what="a minute of the engine pages' scrapes")


def every_page_scraped(store: Prometheus, engine_pages: EnginePages) -> None:
    """Waits until the store answers each awaited series and every engine page's ``up``: a name answered by one
    target says nothing of the others (VictoriaMetrics once answered a namespace's sum of waiting requests 10 short)."""
    for name in (*SERIES_AWAITED, *ENGINE_SERIES_AWAITED):
        store.wait_for(name)
    store.wait_for('up{job="gpuscale-inference-engines"}', min_results=len(engine_pages.targets))


@pytest.fixture(scope="session")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, exporter: Exporter, engine_pages: EnginePages
) -> Iterator[Prometheus]:
    jobs = engines.scrape_jobs(engine_pages.targets)
    with run_prometheus(tmp_path_factory.mktemp("prometheus"), [exporter.target], extra_jobs=jobs) as prom:
        every_page_scraped(prom, engine_pages)
        yield prom


@pytest.fixture(scope="session")
def victoria_metrics(
    tmp_path_factory: pytest.TempPathFactory, exporter: Exporter, engine_pages: EnginePages
) -> Iterator[VictoriaMetrics]:
    with run_victoria_metrics(
        tmp_path_factory.mktemp("victoria-metrics"),
        [exporter.target],
        extra_jobs=engines.scrape_jobs(engine_pages.targets),
    ) as vm:
        every_page_scraped(vm, engine_pages)
        yield vm


@pytest.fixture
def store(request: pytest.FixtureRequest) -> Prometheus:
    """The metric store the adapter reads: Prometheus, or each store in turn for tests marked ``on_every_store``."""
    kind: str = getattr(request, "param", PROMETHEUS)
    server: Prometheus = request.getfixturevalue(kind.replace("-", "_"))
    return server


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeAPIServer]:
    fake = FakeKubeAPIServer()
    populate(fake)
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
def make_adapter(aiohttp_client: AiohttpClient) -> Callable[..., Awaitable[Adapter]]:
    async def make(
        settings: Settings,
        timing: Timing = DEFAULT_TIMING,
        clock: Callable[[], float] = time.monotonic,
        limits: Limits | None = None,
    ) -> Adapter:
        client = await aiohttp_client(create_app(settings, timing=timing, clock=clock, limits=limits))
        adapter = Adapter(client)
        if adapter.components.objects.api is not None:
            await wait_until(lambda: adapter.components.objects.synced, what="metadata cache synced")
        return adapter

    return make


@pytest.fixture
def make_keda_adapter(
    kube: FakeKubeAPIServer, make_adapter: Callable[..., Awaitable[Adapter]], tmp_path: Path
) -> MakeKedaAdapter:
    """An adapter on ``prometheus_url`` with its KEDA scaler on a free port (plain, streams every 0.1 s), the
    ``namespaces`` put in the fake cluster first."""

    async def make(prometheus_url: str, namespaces: tuple[str, ...] = ()) -> Adapter:
        for namespace in namespaces:
            kube.put("namespaces", namespace, {})
        keda = KedaSettings("127.0.0.1:0", stream_interval=0.1)
        return await make_adapter(settings_for(prometheus_url, kube.kubeconfig(tmp_path / "kubeconfig"), keda=keda))

    return make


@pytest.fixture
async def adapter(
    kube: FakeKubeAPIServer, store: Prometheus, make_adapter: Callable[..., Awaitable[Adapter]], tmp_path: Path
) -> Adapter:
    # kube comes first so that it is torn down after the adapter, whose reflectors talk to it
    return await make_adapter(settings_for(store.adapter_url, kube.kubeconfig(tmp_path / "kubeconfig")))


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def make_secure(
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    aiohttp_server: AiohttpServer,
    tmp_path: Path,
    cluster: Cluster,
) -> MakeSecure:
    """An adapter over HTTPS with authentication and authorization delegated to the fake API server.

    The cluster's ConfigMap is published first unless ``publish`` is False; ``auth_api`` replaces the clients the
    adapter would build from its kubeconfig (a shorter review deadline); ``timing`` shortens how long background
    sources may fail; the rest are ``AuthSettings`` fields.
    """

    async def make(
        publish: bool = True,
        ready: bool = True,
        auth_api: AuthAPI | None = None,
        timing: Timing = DEFAULT_TIMING,
        **auth: Any,
    ) -> SecureAdapter:
        if publish:
            cluster.publish(kube)
        grant_cluster_roles(kube)
        kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
        settings = settings_for(
            prometheus.url,
            kubeconfig,
            insecure_serve_http=False,
            insecure_disable_auth=False,
            auth=AuthSettings(
                **{"authentication_kubeconfig": kubeconfig, "authorization_kubeconfig": kubeconfig, **auth}
            ),
            tls=tls.TLSSettings(cert_dir=tmp_path / "certs"),
            config_check_interval=0.1,
        )
        serving = tls.serving_tls(settings.tls, request_certs=True)
        app = create_app(settings, serving=serving, auth_api=auth_api, timing=timing)
        server = await aiohttp_server(app, ssl=serving.context)
        adapter = SecureAdapter(
            app, str(server.make_url("")).rstrip("/"), tmp_path / "certs" / "apiserver.crt", tmp_path
        )
        if ready:

            async def is_ready() -> bool:
                return (await adapter.get("/readyz")).status == 200

            await eventually(is_ready, what="the adapter to be ready")
        return adapter

    return make


@pytest.fixture
async def proxy(store: Prometheus) -> AsyncIterator[PrometheusProxy]:
    """A recording proxy in front of the store (Prometheus, or each store in turn under ``on_every_store``)."""
    p = PrometheusProxy(store.url)
    await p.start()
    yield p
    await p.close()
