import asyncio
from collections.abc import Awaitable, Callable

import pytest

from adapter.self_metrics import AdapterMetrics
from adapter.single_flight import Outcome, SingleFlightCache
from harness.waiting import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Backend:
    """Counts fetches; each waits for ``release`` so tests control when answers arrive."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.fail = False

    async def fetch(self) -> str:
        self.calls += 1
        await self.release.wait()
        if self.fail:
            raise RuntimeError("backend down")
        return f"answer-{self.calls}"


def counted(metrics: AdapterMetrics) -> Callable[[Outcome], None]:
    """What the adapter passes for its query cache: each outcome counted in its self-metrics."""
    return lambda outcome: metrics.cache_requests.labels(outcome).inc()


def samples(metrics: AdapterMetrics, outcome: str) -> float:
    value = metrics.registry.get_sample_value("gpuscale_adapter_query_cache_requests_total", {"result": outcome})
    return value or 0.0


async def test_identical_concurrent_requests_share_one_fetch() -> None:
    metrics = AdapterMetrics()
    cache: SingleFlightCache[str, str] = SingleFlightCache(5.0, on_outcome=counted(metrics))
    backend = Backend()
    waiters = [asyncio.ensure_future(cache.get("q", backend.fetch)) for _ in range(100)]
    await asyncio.sleep(0)
    backend.release.set()
    results = await asyncio.gather(*waiters)
    assert backend.calls == 1
    assert {value for value, _ in results} == {"answer-1"}
    assert sorted(outcome for _, outcome in results).count("miss") == 1
    assert samples(metrics, "shared") == 99
    assert samples(metrics, "miss") == 1


async def test_values_expire_after_the_ttl() -> None:
    clock = Clock()
    metrics = AdapterMetrics()
    cache: SingleFlightCache[str, str] = SingleFlightCache(5.0, clock=clock, on_outcome=counted(metrics))
    backend = Backend()
    backend.release.set()
    assert await cache.get("q", backend.fetch) == ("answer-1", "miss")
    clock.now = 4.9
    assert await cache.get("q", backend.fetch) == ("answer-1", "hit")
    clock.now = 5.1
    assert await cache.get("q", backend.fetch) == ("answer-2", "miss")
    assert samples(metrics, "hit") == 1


async def test_different_keys_do_not_share() -> None:
    cache: SingleFlightCache[str, str] = SingleFlightCache(5.0)
    backend = Backend()
    backend.release.set()
    await cache.get("a", backend.fetch)
    await cache.get("b", backend.fetch)
    assert backend.calls == 2


async def test_failures_reach_every_waiter_and_are_not_cached() -> None:
    cache: SingleFlightCache[str, str] = SingleFlightCache(5.0)
    backend = Backend()
    backend.fail = True
    waiters = [asyncio.ensure_future(cache.get("q", backend.fetch)) for _ in range(3)]
    await asyncio.sleep(0)
    backend.release.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    backend.fail = False
    assert await cache.get("q", backend.fetch) == ("answer-2", "miss")


async def test_a_cancelled_waiter_does_not_cancel_the_others() -> None:
    cache: SingleFlightCache[str, str] = SingleFlightCache(5.0)
    backend = Backend()
    first = asyncio.ensure_future(cache.get("q", backend.fetch))
    second = asyncio.ensure_future(cache.get("q", backend.fetch))
    await asyncio.sleep(0)
    first.cancel()
    backend.release.set()
    assert await second == ("answer-1", "shared")
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await cache.get("q", backend.fetch) == ("answer-1", "hit")


async def test_ttl_zero_still_shares_queries_in_flight() -> None:
    cache: SingleFlightCache[str, str] = SingleFlightCache(0.0)
    backend = Backend()
    waiters = [asyncio.ensure_future(cache.get("q", backend.fetch)) for _ in range(5)]
    await asyncio.sleep(0)
    backend.release.set()
    await asyncio.gather(*waiters)
    assert backend.calls == 1
    assert await cache.get("q", backend.fetch) == ("answer-2", "miss")
    assert len(cache) == 0


async def test_each_answer_keeps_for_its_own_time_and_failures_not_at_all() -> None:
    clock = Clock()
    cache: SingleFlightCache[str, bool] = SingleFlightCache(lambda allowed: 10.0 if allowed else 2.0, clock=clock)
    calls: list[str] = []

    def answer(value: bool | Exception) -> Callable[[], Awaitable[bool]]:
        async def review() -> bool:
            calls.append("review")
            if isinstance(value, Exception):
                raise value
            return value

        return review

    assert await cache.get("yes", answer(True)) == (True, "miss")
    assert await cache.get("no", answer(False)) == (False, "miss")
    clock.now += 5
    assert await cache.get("yes", answer(False)) == (True, "hit")
    assert await cache.get("no", answer(True)) == (True, "miss")
    with pytest.raises(RuntimeError):
        await cache.get("down", answer(RuntimeError("down")))
    assert await cache.get("down", answer(True)) == (True, "miss")
    assert len(calls) == 5
    zero: SingleFlightCache[str, bool] = SingleFlightCache(lambda _: 0.0, clock=clock)
    await zero.get("k", answer(True))
    assert len(zero) == 0


def answering(value: str) -> Callable[[], Awaitable[str]]:
    async def fetch() -> str:
        return value

    return fetch


async def test_an_expired_answer_is_dropped_without_its_key_being_asked_again() -> None:
    cache: SingleFlightCache[str, str] = SingleFlightCache(0.05)
    await cache.get("q", answering("a large answer nobody asks for again"))
    assert len(cache) == 1
    await wait_until(lambda: len(cache) == 0, what="the expired answer to be dropped")


async def test_answers_kept_are_bounded_by_their_weight_and_one_too_heavy_is_not_kept() -> None:
    cache: SingleFlightCache[str, str] = SingleFlightCache(60.0, maxsize=10, weigh=len)
    for key in "abc":
        assert await cache.get(key, answering(key * 4)) == (key * 4, "miss")
    assert await cache.get("c", answering("")) == ("cccc", "hit")
    assert await cache.get("b", answering("")) == ("bbbb", "hit")
    assert await cache.get("a", answering("aa")) == ("aa", "miss")  # 12 > 10: the least recent one went
    assert await cache.get("heavy", answering("x" * 11)) == ("x" * 11, "miss")
    assert await cache.get("heavy", answering("y")) == ("y", "miss")
    assert len(cache) == 3
