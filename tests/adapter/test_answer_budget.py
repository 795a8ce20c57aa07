"""Answers to distinct queries held together under --prometheus-max-bytes-in-flight: never more at once, every
request still answered (waiting for room), an answer that can never fit refused naming the flag, and a wait that
reaches the deadline a 503 naming it too.

Through the forwarding proxy in front of the real Prometheus, answering every query with the same large vector;
each request names other pods, so each is its own query and the single-flight cache shares none. What is held is
read from the budget and, independently of it, from the answers being decoded at once. Memory itself is a
benchmark's figure (``python -m bench.answer_budget``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from adapter.backends import prometheus, prometheus_answer
from adapter.backends.answer_budget import AnswerBudget
from adapter.backends.backend_specs import BackendSpec
from adapter.backends.prometheus import PrometheusClient, QueryResult
from adapter.backends.prometheus_answer import Reply
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.answers import vector
from harness.stores.proxy import PrometheusProxy
from harness.waiting import wait_until

WILDCARD = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization"
# six selectors, six different sets of pods: six queries that nothing shares
SELECTORS = [
    "app in (trainer)",
    "app in (other)",
    "app in (share)",
    "app in (trainer,other)",
    "app in (trainer,share)",
    "app in (other,share)",
]
MiB = 1024 * 1024
ANSWER = vector(6_000)  # 1.5 MB: two fit in the 4 MiB of the tests, three do not
MakeAdapter = Callable[..., Awaitable[Adapter]]


def errors(adapter: Adapter, kind: str) -> float:
    labels = {"endpoint": "query", "kind": kind}
    value = adapter.components.metrics.registry.get_sample_value("gpuscale_adapter_prometheus_errors_total", labels)
    return value or 0.0


def streamed(body: bytes) -> Callable[[], AsyncIterator[bytes]]:
    """``body`` in 64 KiB chunks without a Content-Length, as Prometheus sends any answer but a small one."""

    async def chunks() -> AsyncIterator[bytes]:
        for at in range(0, len(body), 64 * 1024):
            yield body[at : at + 64 * 1024]

    return chunks


class Decodings:
    """The bytes of the answers being decoded at once, seen by wrapping the client's query parser (which runs in
    worker threads); each decoding lasts a little longer, so that any that may run together do."""

    def __init__(self, parse: Callable[[bytearray], Reply[QueryResult]]) -> None:
        self.parse = parse
        self.now = 0
        self.most = 0
        self._lock = threading.Lock()

    def __call__(self, body: bytearray) -> Reply[QueryResult]:
        with self._lock:
            self.now += len(body)
            self.most = max(self.most, self.now)
        try:
            time.sleep(0.1)
            return self.parse(body)
        finally:
            with self._lock:
                self.now -= len(body)


@pytest.fixture
def make_bounded(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> Callable[..., Awaitable[Adapter]]:
    """An adapter whose answers may hold ``in_flight`` bytes at once, with no query cache beyond single flight."""

    async def make(in_flight: int, timeout: float = 20.0, max_answer_bytes: int = 32 * MiB) -> Adapter:
        settings = settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"), cache_ttl=0.0)
        config = dataclasses.replace(
            settings.prometheus, timeout=timeout, max_answer_bytes=max_answer_bytes, max_bytes_in_flight=in_flight
        )
        return await make_adapter(dataclasses.replace(settings, prometheus=config))

    return make


@pytest.mark.parametrize("sent", ["with a Content-Length", "streamed without one"])
async def test_distinct_answers_at_once_hold_no_more_than_the_budget_and_every_request_is_answered(
    make_bounded: Callable[..., Awaitable[Adapter]],
    proxy: PrometheusProxy,
    monkeypatch: pytest.MonkeyPatch,
    sent: str,
) -> None:
    adapter = await make_bounded(4 * MiB, max_answer_bytes=2 * MiB)
    decodings = Decodings(prometheus_answer.query_reply)
    monkeypatch.setattr(prometheus, "query_reply", decodings)
    if sent == "streamed without one":
        proxy.stream = streamed(ANSWER)
    else:
        proxy.respond = (200, ANSWER)
    queries = proxy.count("/api/v1/query")

    answers = await asyncio.gather(*(adapter.client.get(WILDCARD, params={"labelSelector": s}) for s in SELECTORS))

    assert [a.status for a in answers] == [200] * len(SELECTORS), [await a.text() for a in answers]
    assert [(await a.json())["items"] for a in answers] == [[]] * len(SELECTORS)  # the answer names none of them
    assert proxy.count("/api/v1/query") - queries >= len(SELECTORS)
    assert 0 < decodings.most <= 4 * MiB, f"{decodings.most / MiB:.1f} MiB of answers were decoded at once"
    budget = adapter.components.answer_budget
    assert budget.peak <= budget.limit
    assert budget.waits > 0  # the six did not fit at once: some waited for room, and got it
    assert budget.held == 0  # every answer gave its room back
    assert errors(adapter, "no_room") == errors(adapter, "too_large") == 0


TOO_LARGE = "it is larger than the 1Mi limit of --prometheus-max-bytes-in-flight"


@pytest.mark.parametrize("sent", ["with a Content-Length", "streamed without one"])
async def test_an_answer_larger_than_the_budget_is_a_503_naming_the_flag(
    make_bounded: Callable[..., Awaitable[Adapter]], proxy: PrometheusProxy, sent: str
) -> None:
    adapter = await make_bounded(MiB)  # under the 32Mi limit of one answer: the budget's is the one passed
    if sent == "streamed without one":
        proxy.stream = streamed(ANSWER)
    else:
        proxy.respond = (200, ANSWER)
    status = await adapter.get(WILDCARD, status=503, labelSelector="app=trainer")
    assert status["reason"] == "ServiceUnavailable"
    assert status["message"] == f"the metrics backend (Prometheus) sent an answer the adapter cannot use: {TOO_LARGE}"
    assert errors(adapter, "too_large") >= 1
    assert adapter.components.answer_budget.held == 0


async def test_a_request_that_finds_no_room_before_its_deadline_is_a_503_naming_the_flag(
    make_bounded: Callable[..., Awaitable[Adapter]], proxy: PrometheusProxy
) -> None:
    adapter = await make_bounded(MiB, timeout=1.0)
    budget = adapter.components.answer_budget
    ended = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield ANSWER[: 900 * 1024]  # most of the room, then nothing until the test lets it end
        await ended.wait()

    # a relist's series listing, whose deadline (30s) is later than the query's (1s), holds the room
    proxy.stream = stalled
    relist = asyncio.create_task(adapter.components.discovery.relist())
    await wait_until(lambda: budget.held >= 800 * 1024, what="the listing to hold most of the room")
    status = await adapter.get(WILDCARD, status=503, labelSelector="app=trainer")
    assert status["reason"] == "ServiceUnavailable"
    assert status["message"] == (
        "the adapter is reading as many Prometheus answers as --prometheus-max-bytes-in-flight allows; try again"
    )
    assert errors(adapter, "no_room") >= 1
    ended.set()  # the listing ends cut short: the relist fails and keeps its catalog
    await relist
    assert budget.held == 0
    proxy.stream = None
    assert len((await adapter.get(WILDCARD, labelSelector="app=trainer"))["items"]) == 2


async def test_every_backend_reads_into_the_one_budget(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    backends = (BackendSpec("tenant-b", proxy.url), BackendSpec("tenant-c", proxy.url))
    settings = settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"), backends=backends)
    components = (await make_adapter(settings)).components
    clients = list(components.backends.values())
    assert len(clients) == 3
    assert all(isinstance(c, PrometheusClient) and c.budget is components.answer_budget for c in clients)
    assert components.answer_budget.limit == 48 * MiB


async def test_answers_that_each_hold_part_of_the_room_while_they_wait_for_more_all_end() -> None:
    """Six answers of unknown size, each up to 6,000 bytes, read 1,000 bytes at a time into room for 10,000: room
    given to whoever asks would leave all six holding part of it and waiting for one another for good."""
    budget = AnswerBudget(10_000)
    done: list[int] = []

    async def read(index: int) -> None:
        answer = budget.answer(6_000)
        try:
            for _ in range(6):
                await answer.take(1_000)
                await asyncio.sleep(0)  # the others' turn: each holds part of the room at once
            done.append(index)
        finally:
            answer.release()

    async with asyncio.timeout(10):  # a guard against hanging, not a measurement
        await asyncio.gather(*(read(i) for i in range(6)))
    assert sorted(done) == list(range(6))
    assert budget.peak <= 10_000
    assert budget.waits > 0
    assert budget.held == 0


async def test_an_answer_of_known_size_leaves_the_rest_of_the_room_to_others() -> None:
    budget = AnswerBudget(10_000)
    known, unknown = budget.answer(6_000), budget.answer(6_000)
    known.expect(2_000)
    await known.take(2_000)
    # 8,000 left: room for all of an unknown answer's 6,000 however the known one ends
    async with asyncio.timeout(10):
        await unknown.take(6_000)
    assert budget.held == 8_000
    known.release()
    unknown.release()
    assert budget.held == 0
