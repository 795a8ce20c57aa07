"""Two replicas behind the aggregation layer, one of them leaving mid-load.

Clients (several, each on its own keep-alive connection) ask the stand-in API server, whose aggregator sends each
request to one of the Service's ready endpoints picked at random and never tries another (``harness/kube/aggregator.py``
says what it reproduces of kube-aggregator). Then one replica goes:

- killed (SIGKILL): its endpoint is removed in the same step, as the endpoints controller removes a pod whose
  container died. Only requests in flight at the killed replica fail.
- stopped (SIGTERM), as a rollout or a node drain stops it, with ``--shutdown-delay-duration``: its endpoint is
  removed a second later, as the endpoints controller and the aggregator's informer catch up. It answers what
  still arrives, fails ``/readyz``, then stops taking connections and finishes what is in flight (held at its
  Prometheus until then). No request fails.
- stopped without the delay: the requests sent to it before its endpoint is removed are refused, which is why the
  manifests set one.

Prometheus answers every query at once but for the leaving replica's, which passes a proxy that can hold them.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from harness.adapter.in_process import populate
from harness.adapter.process import AdapterProcess
from harness.adapter.replicas import replicas
from harness.kube.aggregator import ADMIN, APIService, Endpoints
from harness.kube.api import TOKEN, FakeKubeAPIServer
from harness.kube.cluster import Cluster
from harness.kube.pki import client_context
from harness.stores.prometheus import Prometheus
from harness.stores.proxy import PrometheusProxy
from harness.waiting import eventually, wait_until

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

CM1, CM2 = "/apis/custom.metrics.k8s.io/v1beta1", "/apis/custom.metrics.k8s.io/v1beta2"
EM = "/apis/external.metrics.k8s.io/v1beta1"
PATHS = [
    f"{CM2}/namespaces/ml/pods/%2A/gpu_utilization?labelSelector=app%3Dtrainer",
    CM2,
    f"{CM1}/namespaces/ml/pods/trainer-0/gpu_memory_used",
    f"{EM}/namespaces/ml/gpu_utilization?labelSelector=Hostname%3Dnode-a",
    f"{CM2}/nodes/%2A/gpu_utilization?labelSelector=pool%3Dtrain",
    EM,
]
CLIENTS = 8
AFTER = 150  # requests answered after the replica left, before the load stops


class HeldProxy(PrometheusProxy):
    """A proxy that holds queries (not relists) while ``open`` is clear."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.open = asyncio.Event()
        self.open.set()
        self.held = 0

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/api/v1/query" and not self.open.is_set():
            self.held += 1
            await self.open.wait()
            self.held -= 1
        return await super()._forward(request)


@dataclass(frozen=True)
class Done:
    id: int
    path: str
    status: int  # 0: the client got no answer at all
    text: str


@dataclass
class Load:
    """``CLIENTS`` clients asking ``PATHS`` in turn through the API server, each on its keep-alive connection."""

    url: str
    done: list[Done] = field(default_factory=list)
    in_flight: set[int] = field(default_factory=set)
    ids: itertools.count[int] = field(default_factory=itertools.count)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def failed(self) -> list[Done]:
        return [d for d in self.done if d.status != 200]

    async def client(self, offset: int) -> None:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as session:
            for path in itertools.islice(itertools.cycle(PATHS), offset, None):
                if self.stop.is_set():
                    return
                rid = next(self.ids)
                self.in_flight.add(rid)
                try:
                    async with session.get(self.url + path) as resp:
                        status, text = resp.status, (await resp.read()).decode(errors="replace")
                    if status == 200 and '"kind":' not in text:
                        status = -1  # an answer, but not the API's
                except aiohttp.ClientError as e:
                    status, text = 0, repr(e)
                finally:
                    self.in_flight.discard(rid)
                self.done.append(Done(rid, path, status, text[:300]))

    async def answered_since(self, count: int, since: int) -> None:
        await wait_until(lambda: sum(d.id > since for d in self.done) >= count, within=120, what=f"{count} answers")


@dataclass
class Cluster2:
    kube: FakeKubeAPIServer
    endpoints: Endpoints
    stays: AdapterProcess
    leaves: AdapterProcess
    held: HeldProxy  # the Prometheus of the replica that leaves
    load: Load
    sent_before: int = 0  # requests sent to the leaving replica before it was told to go

    @property
    def sent(self) -> int:
        return self.kube.aggregator.sent[self.leaves.url]

    @property
    def in_flight_at_leaving(self) -> int:
        return self.kube.aggregator.in_flight[self.leaves.url]

    async def steady(self) -> None:
        """Both replicas answering the load."""
        for adapter in (self.stays, self.leaves):

            def loaded(url: str = adapter.url) -> bool:
                return self.kube.aggregator.sent[url] >= 30

            await wait_until(loaded, within=60, what="load on both")

    async def log_says(self, text: str) -> None:
        await wait_until(lambda: text in self.leaves.log.read_text(), within=30, what=f"the log to say {text!r}")

    async def readyz(self) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.leaves.url}/readyz", ssl=self.leaves.context()) as resp,
        ):
            return resp.status, await resp.text()


@asynccontextmanager
async def two_replicas(prometheus: Prometheus, tmp_path: Path, *args: str) -> AsyncIterator[Cluster2]:
    kube = FakeKubeAPIServer()
    populate(kube)
    await kube.start()
    kube.reviews.grant(
        user=ADMIN.username, verbs=("get", "list"), api_groups=("custom.metrics.k8s.io", "external.metrics.k8s.io")
    )
    held = HeldProxy(prometheus.url)
    await held.start()
    cluster = Cluster()
    load = Load(kube.url)
    clients: list[asyncio.Task[None]] = []
    try:
        # no value is reused, so that every metric request reaches Prometheus
        async with replicas(kube, [prometheus.url, held.url], tmp_path, "--metrics-cache-ttl=0s", *args,
                            cluster=cluster) as (stays, leaves):  # fmt: skip
            endpoints = Endpoints(stays.url, leaves.url)
            tls = client_context(stays.cert, cluster.front_proxy, tmp_path / "aggregator")
            for group, version in (("custom.metrics.k8s.io", "v1beta1"), ("custom.metrics.k8s.io", "v1beta2"),
                                   ("external.metrics.k8s.io", "v1beta1")):  # fmt: skip
                kube.aggregator.services.append(APIService(group, version, endpoints, tls))
            clients = [asyncio.create_task(load.client(i)) for i in range(CLIENTS)]
            replicas_ = Cluster2(kube, endpoints, stays, leaves, held, load)
            await replicas_.steady()
            yield replicas_
            load.stop.set()
            held.open.set()
            await asyncio.gather(*clients)
    finally:
        load.stop.set()
        held.open.set()
        for task in clients:
            task.cancel()
        await held.close()
        await kube.stop()


@pytest.fixture
async def with_delay(prometheus: Prometheus, tmp_path: Path) -> AsyncIterator[Cluster2]:
    async with two_replicas(prometheus, tmp_path, "--shutdown-delay-duration=3s") as c:
        yield c


@pytest.fixture
async def without_delay(prometheus: Prometheus, tmp_path: Path) -> AsyncIterator[Cluster2]:
    async with two_replicas(prometheus, tmp_path) as c:
        yield c


def report(what: str, c: Cluster2, **counts: int) -> None:
    print(f"\n{what}: {len(c.load.done)} requests, {len(c.load.failed)} failed; " + ", ".join(
        f"{k.replace('_', ' ')} {v}" for k, v in counts.items()))  # fmt: skip


async def test_a_killed_replica_fails_only_the_requests_in_flight_at_it(without_delay: Cluster2) -> None:
    c = without_delay
    assert c.leaves.process is not None
    os.kill(c.leaves.pid, signal.SIGKILL)
    c.endpoints.ready.remove(c.leaves.url)
    in_flight, at_killed, last = set(c.load.in_flight), c.in_flight_at_leaving, max(c.load.in_flight, default=0)
    assert await c.leaves.process.wait() == -signal.SIGKILL
    await c.load.answered_since(AFTER, last)
    c.load.stop.set()

    failed = c.load.failed
    report("SIGKILL", c, in_flight_at_the_kill=len(in_flight), of_them_at_the_killed_replica=at_killed)
    assert {d.id for d in failed} <= in_flight, [d for d in failed if d.id not in in_flight]
    assert len(failed) <= at_killed
    assert all(d.status == 503 for d in failed), failed
    after = [d for d in c.load.done if d.id > last]
    assert len(after) >= AFTER
    assert all(d.status == 200 for d in after)


async def test_a_replica_stopped_with_sigterm_fails_no_request(with_delay: Cluster2) -> None:
    c = with_delay
    assert c.leaves.process is not None
    sent_before = c.sent
    c.leaves.process.send_signal(signal.SIGTERM)
    last = max(c.load.in_flight, default=0)
    ready = await _eventually_unready(c)
    assert "[-]shutdown failed" in ready
    await asyncio.sleep(1)  # the endpoints controller and the aggregator's informer catching up
    # what reaches it from now on waits at its Prometheus, so that requests are in flight when its port closes
    c.held.open.clear()
    await wait_until(lambda: c.held.held > 0, within=30, what="a request held at the leaving replica")
    c.endpoints.ready.remove(c.leaves.url)
    sent_after_sigterm = c.sent - sent_before
    await c.log_says("shutting down: no new connections")
    in_flight_at_close = c.in_flight_at_leaving
    assert in_flight_at_close > 0
    c.held.open.set()
    assert await c.leaves.process.wait() == 0
    await c.load.answered_since(AFTER, last)
    c.load.stop.set()

    report(
        "SIGTERM, --shutdown-delay-duration=3s, endpoint removed 1 s after", c,
        sent_to_it_after_sigterm=sent_after_sigterm, in_flight_at_it_when_its_port_closed=in_flight_at_close,
    )  # fmt: skip
    assert sent_after_sigterm > 0
    assert c.load.failed == []
    assert "stopped" in c.leaves.log.read_text()


async def test_without_a_shutdown_delay_requests_sent_before_the_endpoints_catch_up_fail(
    without_delay: Cluster2,
) -> None:
    c = without_delay
    assert c.leaves.process is not None
    sent_before = c.sent
    c.leaves.process.send_signal(signal.SIGTERM)
    last = max(c.load.in_flight, default=0)
    await asyncio.sleep(1)  # as above: the endpoint is still listed for a while
    c.endpoints.ready.remove(c.leaves.url)
    sent_after_sigterm = c.sent - sent_before
    assert await c.leaves.process.wait() == 0
    await c.load.answered_since(AFTER, last)
    c.load.stop.set()

    report("SIGTERM without a delay, endpoint removed 1 s after", c, sent_to_it_after_sigterm=sent_after_sigterm)
    assert c.load.failed, "requests sent to a closed port were answered"
    assert all(d.status == 503 for d in c.load.failed), [d for d in c.load.failed if d.status != 503][:3]


async def _eventually_unready(c: Cluster2) -> str:
    text = ""

    async def unready() -> bool:
        nonlocal text
        status, text = await c.readyz()
        return status == 503

    await eventually(unready, within=30, what="/readyz to fail")
    return text
