"""``/readyz`` follows the background sources: it fails while one has been failing past its bound (bounds and
back-offs shortened through ``Timing``), passes again once it recovers, and says why only to callers that
authenticate."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from adapter.backends.prometheus import QueryResult
from adapter.backends.prometheus_answer import SeriesShapes
from adapter.components import components
from adapter.http import health
from adapter.self_metrics import AdapterMetrics
from common.freshness import Timing
from common.supervisor import stop
from harness.adapter.in_process import Adapter, MakeSecure, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import AGGREGATOR, HPA_TOKEN, STRANGER_TOKEN, Cluster, SecureAdapter
from harness.stores.prometheus import Prometheus
from harness.stores.proxy import PrometheusProxy
from harness.waiting import eventually, wait_until

SHORT = Timing(stale_after=1.0, max_backoff=0.2)
STALE_LOG = "/readyz fails until it recovers"


async def ready(adapter: SecureAdapter | Adapter, status: int) -> None:
    async def answers() -> bool:
        if isinstance(adapter, SecureAdapter):
            return (await adapter.get("/readyz")).status == status
        return (await adapter.client.get("/readyz")).status == status

    await eventually(answers, within=15, what=f"/readyz to answer {status}")


async def break_watch(kube: FakeKubeAPIServer, resource: str) -> None:
    """LISTs fail from now on, and the watch of ``resource`` gets a line that is not an event, so it lists again."""
    kube.fail_lists = 1_000_000
    await wait_until(lambda: any(w.resource == resource for w in kube.watches), what=f"a watch of {resource}")
    kube.inject(resource, b"[1,2,3]\n")


async def test_readyz_fails_while_the_configmap_cannot_be_read_and_passes_after(
    make_secure: MakeSecure, kube: FakeKubeAPIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "common.freshness")
    adapter = await make_secure(timing=SHORT)
    assert adapter.sample("gpuscale_adapter_auth_config_loaded") == 1
    await break_watch(kube, "configmaps")
    await ready(adapter, 503)
    r = await adapter.get("/readyz?verbose", token=HPA_TOKEN)
    assert "[+]object-cache ok\n" in r.text
    assert "[-]authentication failed: authentication/configmap failing for " in r.text
    assert "HTTP 500 InternalError" in r.text
    assert adapter.sample("gpuscale_adapter_auth_config_loaded") == 0  # a CA removed meanwhile would be trusted
    assert adapter.sample("gpuscale_adapter_source_stale", source="authentication/configmap") == 1
    assert "authentication/configmap failing for" in caplog.text
    assert STALE_LOG in caplog.text

    kube.fail_lists = 0
    await ready(adapter, 200)
    assert adapter.sample("gpuscale_adapter_auth_config_loaded") == 1
    assert adapter.sample("gpuscale_adapter_source_stale", source="authentication/configmap") == 0
    assert "authentication/configmap recovered after failing for" in caplog.text


async def test_readyz_fails_while_the_pod_cache_cannot_list_and_passes_after(
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    make_adapter: Callable[..., Awaitable[Adapter]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "common.freshness")
    adapter = await make_adapter(settings_for(prometheus.url, kube.kubeconfig(tmp_path / "kubeconfig")), SHORT)
    await break_watch(kube, "pods")
    await ready(adapter, 503)
    text = await (await adapter.client.get("/readyz?verbose")).text()
    # without authentication there is nothing to protect: everyone reads why
    assert "[-]object-cache failed: object-cache/pods failing for " in text
    assert "[+]discovery ok\n" in text
    assert text.endswith("readyz check failed\n")
    kube.fail_lists = 0
    await ready(adapter, 200)
    assert "object-cache/pods recovered" in caplog.text


async def test_relists_failing_past_their_bound_are_reported_without_failing_readyz(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: Callable[..., Awaitable[Adapter]], tmp_path: Path
) -> None:
    settings = settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"), relist_interval=0.2)
    adapter = await make_adapter(settings, SHORT)
    await ready(adapter, 200)
    proxy.respond = (503, b"")

    async def reported() -> bool:
        text = await (await adapter.client.get("/readyz?verbose")).text()
        # each failed relist is noted at once; past its bound the source is reported stale too
        return "[+]discovery ok, the last relist failed" in text and "; discovery failing for " in text

    # Prometheus being down must not take the APIService away: the last good catalog keeps answering
    await eventually(reported, within=15, what="the stale relist to be reported")
    assert (await adapter.client.get("/readyz")).status == 200
    stale = adapter.components.metrics.registry.get_sample_value
    assert stale("gpuscale_adapter_source_stale", {"source": "discovery"}) == 1
    proxy.respond = None

    async def recovered() -> bool:
        return not await reported()

    await eventually(recovered, within=15, what="the relist to recover")
    assert stale("gpuscale_adapter_source_stale", {"source": "discovery"}) == 0


class BrokenPrometheus:
    """A Prometheus client that fails in a way nobody expected (not a PrometheusError)."""

    async def query(self, promql: str) -> QueryResult:
        raise AssertionError("not asked")

    async def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        raise RuntimeError("a bug in the client")

    async def series(self, match: str, start: float, end: float) -> SeriesShapes:
        raise RuntimeError("a bug in the client")


async def test_a_background_task_that_dies_is_restarted_and_reported_until_it_works(
    prometheus: Prometheus, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = AdapterMetrics()
    async with components(settings_for(prometheus.url, None, relist_interval=0.2), metrics, timing=SHORT) as c:
        c.discovery.prometheus = BrokenPrometheus()
        tasks = await c.start()
        try:
            restarts = "gpuscale_adapter_background_restarts_total"
            await wait_until(
                lambda: (metrics.registry.get_sample_value(restarts, {"task": "discovery"}) or 0) >= 2,
                what="the relist task to be restarted",
            )
            assert "background task discovery stopped (RuntimeError: a bug in the client)" in caplog.text
            await wait_until(
                lambda: "its background task stopped" in health.checks(c, None)[0].detail,
                what="the discovery check to report it",
            )
            assert health.checks(c, None)[0].ok  # advisory: see test_relists_failing_past_their_bound_...
            c.discovery.prometheus = c.prometheus
            await wait_until(lambda: not health.checks(c, None)[0].detail, what="the discovery check to clear")
        finally:
            await stop(tasks)


async def test_readyz_says_why_only_to_callers_that_authenticate(
    make_secure: MakeSecure, kube: FakeKubeAPIServer, cluster: Cluster
) -> None:
    adapter = await make_secure(timing=SHORT)
    await break_watch(kube, "configmaps")
    await ready(adapter, 503)
    withheld = "[-]authentication failed: reason withheld\n"
    for anonymous in ({}, {"token": STRANGER_TOKEN[:-1]}):  # nothing, or a token that does not authenticate
        for path in ("/readyz", "/readyz?verbose"):
            r = await adapter.get(path, **anonymous)  # type: ignore[arg-type]
            assert r.status == 503
            assert r.text == (
                "[+]discovery ok\n[+]object-cache ok\n" + withheld + "[+]serving-certificate ok\nreadyz check failed\n"
            )
    # any authenticated caller, whatever it may read otherwise: a token, the front proxy, a client certificate
    for credentials in (
        {"token": STRANGER_TOKEN},
        {"identity": cluster.front_proxy, "headers": AGGREGATOR},
        {"identity": cluster.client_ca.issue("bob")},
    ):
        r = await adapter.get("/readyz?verbose", **credentials)
        assert r.status == 503
        assert withheld not in r.text
        assert "[-]authentication failed: authentication/configmap failing for " in r.text

    kube.fail_lists = 0
    await ready(adapter, 200)
    r = await adapter.get("/readyz?verbose")
    assert (r.status, r.text.splitlines()[-1]) == (200, "readyz check passed")
