"""The Prometheus connection: POST for long queries, credentials, TLS, timeouts, outages and recovery, sharing."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trustme

from adapter.backends.prometheus import PrometheusClient, PrometheusConfig, make_session
from adapter.errors import PrometheusError, QueryError
from adapter.self_metrics import AdapterMetrics
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.prometheus import Prometheus
from harness.stores.proxy import PrometheusProxy
from harness.waiting import eventually

CM = "/apis/custom.metrics.k8s.io/v1beta2"
TRAINERS = f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer"


@pytest.fixture
async def proxied(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: Callable[..., Awaitable[Adapter]], tmp_path: Path
) -> Adapter:
    settings = settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"))
    settings = dataclasses.replace(settings, prometheus=dataclasses.replace(settings.prometheus, timeout=1.0))
    return await make_adapter(settings)


async def client(config: PrometheusConfig) -> PrometheusClient:
    return PrometheusClient(make_session(config), config, AdapterMetrics())


async def test_long_queries_are_posted_short_ones_use_get(proxy: PrometheusProxy) -> None:
    c = await client(PrometheusConfig(url=proxy.url))
    try:
        names = "|".join(f"pod-with-a-long-generated-name-{i:05d}" for i in range(1500))
        long_query = f'count(DCGM_FI_DEV_GPU_UTIL{{pod=~"{names}"}}) or vector(0)'
        assert len(long_query) > 25_000
        result = await c.query(long_query)
        assert [s.value for s in result.samples] == ["0"]
        await c.query("count(DCGM_FI_DEV_GPU_UTIL)")
    finally:
        await c.session.close()
    assert [s.method for s in proxy.seen] == ["POST", "GET"]


async def test_prometheus_verb_post_posts_every_query(proxy: PrometheusProxy) -> None:
    c = await client(PrometheusConfig(url=proxy.url, verb="POST"))
    try:
        await c.query("up")
    finally:
        await c.session.close()
    assert proxy.count("/api/v1/query", "POST") == 1


async def test_bearer_token_file_is_reread_when_it_changes_and_headers_are_sent(
    proxy: PrometheusProxy, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("first-token\n")
    config = PrometheusConfig(url=proxy.url, token_file=token, headers=(("X-Scope-OrgID", "tenant-1"),))
    c = await client(config)
    try:
        await c.query("up")
        token.write_text("second-token-rotated")
        await c.query("up")
    finally:
        await c.session.close()
    assert [s.headers["Authorization"] for s in proxy.seen] == ["Bearer first-token", "Bearer second-token-rotated"]
    assert {s.headers["X-Scope-OrgID"] for s in proxy.seen} == {"tenant-1"}


async def test_a_missing_token_file_is_a_prometheus_error(proxy: PrometheusProxy, tmp_path: Path) -> None:
    c = await client(PrometheusConfig(url=proxy.url, token_file=tmp_path / "absent"))
    try:
        with pytest.raises(PrometheusError, match="cannot read the Prometheus token file"):
            await c.query("up")
    finally:
        await c.session.close()


async def test_tls_with_a_ca_file_and_a_client_certificate(prometheus: Prometheus, tmp_path: Path) -> None:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    ca.configure_trust(server)
    server.verify_mode = ssl.CERT_REQUIRED
    tls_proxy = PrometheusProxy(prometheus.url, ssl_context=server)
    await tls_proxy.start()
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "client.pem", tmp_path / "client.key"
    ca.cert_pem.write_to_path(str(ca_file))
    leaf = ca.issue_cert("gpuscale-adapter")
    leaf.cert_chain_pems[0].write_to_path(str(cert_file))
    leaf.private_key_pem.write_to_path(str(key_file))
    try:
        good = await client(
            PrometheusConfig(url=tls_proxy.url, ca_file=ca_file, client_cert_file=cert_file, client_key_file=key_file)
        )
        try:
            assert (await good.query("vector(1)")).samples[0].value == "1"
        finally:
            await good.session.close()
        no_cert = await client(PrometheusConfig(url=tls_proxy.url, ca_file=ca_file))
        try:
            with pytest.raises(PrometheusError, match="unreachable"):
                await no_cert.query("vector(1)")
        finally:
            await no_cert.session.close()
    finally:
        await tls_proxy.close()


async def test_a_query_prometheus_refuses_is_a_query_error_with_its_message(proxy: PrometheusProxy) -> None:
    c = await client(PrometheusConfig(url=proxy.url))
    try:
        with pytest.raises(QueryError, match="bad_data"):
            await c.query("sum(up")
    finally:
        await c.session.close()


async def test_slow_prometheus_gets_a_503_within_the_timeout(
    proxied: Adapter, proxy: PrometheusProxy, caplog: pytest.LogCaptureFixture
) -> None:
    proxy.delay = 30
    body = await proxied.get(TRAINERS, status=503)
    assert body["kind"] == "Status"
    assert body["reason"] == "ServiceUnavailable"
    assert body["message"] == "the metrics backend (Prometheus) is currently unavailable"
    assert "did not answer within 1s" in caplog.text


async def test_prometheus_down_gets_a_503_and_the_adapter_recovers_by_itself(
    proxied: Adapter, proxy: PrometheusProxy
) -> None:
    await proxy.stop()
    body = await proxied.get(TRAINERS, status=503)
    assert body["reason"] == "ServiceUnavailable"
    # discovery is served from memory while Prometheus is away
    resources = await proxied.get(CM)
    assert "pods/gpu_utilization" in {r["name"] for r in resources["resources"]}
    await proxied.components.discovery.relist()
    assert proxied.components.discovery.catalog.error is not None
    await proxy.start()

    async def answering() -> bool:
        resp = await proxied.client.get(TRAINERS)
        return resp.status == 200

    await eventually(answering, what="the adapter to answer again")
    assert len((await proxied.get(TRAINERS))["items"]) == 2


async def test_identical_concurrent_requests_cause_one_prometheus_query(
    proxied: Adapter, proxy: PrometheusProxy
) -> None:
    before = proxy.count("/api/v1/query")
    responses = await asyncio.gather(*(proxied.client.get(TRAINERS) for _ in range(100)))
    assert {r.status for r in responses} == {200}
    bodies = [await r.json() for r in responses]
    assert all(b == bodies[0] for b in bodies)
    assert proxy.count("/api/v1/query") - before == 1


async def test_wildcards_over_many_pods_post_their_query(
    proxied: Adapter, proxy: PrometheusProxy, kube: FakeKubeAPIServer
) -> None:
    for i in range(1500):
        kube.put("pods", f"worker-with-a-long-generated-name-{i:05d}", {"app": "many"}, namespace="ml")
    pods = next(r for r in proxied.components.objects.reflectors.values() if r.info.kind == "Pod")

    async def listed() -> bool:
        return len(pods) >= 1507

    await eventually(listed, what="1500 pods in the cache")
    body = await proxied.get(f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dmany")
    assert body["items"] == []
    posted = [s for s in proxy.seen if s.method == "POST" and s.path == "/api/v1/query"]
    assert len(posted) == 2  # one per label spelling of the default rules
    assert all(len(s.body) > 25_000 for s in posted)


async def test_discovery_lists_series_of_the_last_max_age(proxied: Adapter, proxy: PrometheusProxy) -> None:
    discovery = proxied.components.discovery
    await discovery.relist()
    listed = [s for s in proxy.seen if s.path == "/api/v1/series"]
    assert listed  # the built-in rules pin their series names: one listing each, no label lookups
    assert {s.path for s in proxy.seen} & {"/api/v1/labels", "/api/v1/label/__name__/values"} == set()
    for s in listed:
        start, end = float(s.query["start"]), float(s.query["end"])
        assert end - start == pytest.approx(discovery.max_age, abs=0.01)


async def test_the_urls_query_parameters_go_with_every_request(proxy: PrometheusProxy) -> None:
    """As vmalert's -datasource.url: VictoriaMetrics' nocache=1, or whatever else a store reads, set once."""
    c = await client(PrometheusConfig(url=f"{proxy.url}/?nocache=1&tag=a%20b"))
    try:
        names = "|".join(f"pod-with-a-long-generated-name-{i:05d}" for i in range(1500))
        await c.query(f'count(DCGM_FI_DEV_GPU_UTIL{{pod=~"{names}"}}) or vector(0)')  # POSTed
        result = await c.query("count(DCGM_FI_DEV_GPU_UTIL)")
        await c.series("DCGM_FI_DEV_GPU_UTIL", 0, 1e10)
        await c.label_values("__name__", "{__name__=~'DCGM_.*'}", 0, 1e10)
    finally:
        await c.session.close()
    assert [s.value for s in result.samples] == ["10"]  # Prometheus ignores what it does not read
    assert [s.path for s in proxy.seen] == [
        "/api/v1/query",
        "/api/v1/query",
        "/api/v1/series",
        "/api/v1/label/__name__/values",
    ]
    posted, *got = proxy.seen
    assert posted.method == "POST"
    assert posted.body.startswith(b"nocache=1&tag=a+b&query=")
    assert all((s.method, s.query["nocache"], s.query["tag"]) == ("GET", "1", "a b") for s in got)
