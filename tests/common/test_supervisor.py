"""Background tasks under the supervisor (common/supervisor.py): whatever ends them, they start again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import pytest

from adapter.self_metrics import AdapterMetrics
from common.freshness import Timing
from common.supervisor import HEALTHY_RUN_SECONDS, Work, polled, supervise

LOGGER = "common.supervisor"


class Runs:
    """A task's runs, each ending as scripted: an exception, None (it returns), or "hang" (it runs until cancelled)."""

    def __init__(self, *endings: BaseException | str | None) -> None:
        self.endings = list(endings)
        self.count = 0
        self.done = asyncio.Event()

    async def run(self) -> None:
        self.count += 1
        ending = self.endings.pop(0) if self.endings else "hang"
        if ending == "hang":
            self.done.set()
            await asyncio.Event().wait()
        if isinstance(ending, BaseException):
            raise ending


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


async def supervised(work: Work, metrics: AdapterMetrics, clock: Clock, done: Callable[[], Awaitable[object]]) -> None:
    task = asyncio.create_task(
        supervise(work, metrics, max_backoff=4.0, sleep=clock.sleep, clock=lambda: clock.now, jitter=lambda: 0.0)
    )
    try:
        await asyncio.wait_for(done(), 5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert task.cancelled()  # its own cancellation ends it, and only that


async def test_a_task_that_fails_or_returns_is_logged_counted_and_started_again_backing_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    metrics, clock = AdapterMetrics(), Clock()
    source = metrics.sources.add("object-cache/pods", 60.0, lambda: clock.now)
    runs = Runs(RuntimeError("boom"), ValueError(), None, KeyError("k"), RuntimeError("again"))
    await supervised(Work("object-cache/pods", runs.run, source), metrics, clock, runs.done.wait)
    assert runs.count == 6
    assert clock.sleeps == [1.0, 2.0, 4.0, 4.0, 4.0]
    lines = [r for r in caplog.records if r.name == LOGGER]
    assert [r.levelno for r in lines] == [logging.ERROR] * 5
    assert [r.exc_info for r in lines] == [None] * 5  # one line each: no traceback below -v=4
    assert lines[0].getMessage() == (
        "background task object-cache/pods stopped (RuntimeError: boom); starting it again in 1.0 s"
    )
    assert "(ValueError)" in lines[1].getMessage()
    assert "(it returned)" in lines[2].getMessage()
    sample = metrics.registry.get_sample_value
    assert sample("gpuscale_adapter_background_restarts_total", {"task": "object-cache/pods"}) == 5
    assert source.failing_since == 0.0  # since the first stop; the next success clears it
    assert source.error == "its background task stopped (RuntimeError: again)"


async def test_a_cancelled_error_from_inside_is_a_stop_like_any_other() -> None:
    metrics, clock = AdapterMetrics(), Clock()
    runs = Runs(asyncio.CancelledError(), asyncio.CancelledError())
    await supervised(Work("discovery", runs.run), metrics, clock, runs.done.wait)
    assert runs.count == 3
    assert clock.sleeps == [1.0, 2.0]


async def test_the_back_off_starts_over_after_a_run_that_lasted(caplog: pytest.LogCaptureFixture) -> None:
    metrics, clock = AdapterMetrics(), Clock()
    endings = [RuntimeError("1"), RuntimeError("2"), "long", RuntimeError("3")]
    count = 0
    finished = asyncio.Event()

    async def run() -> None:
        nonlocal count
        count += 1
        if not endings:
            finished.set()
            await asyncio.Event().wait()
        ending = endings.pop(0)
        if ending == "long":
            clock.now += HEALTHY_RUN_SECONDS
            raise RuntimeError("after a long run")
        raise ending  # type: ignore[misc]

    await supervised(Work("w", run), metrics, clock, finished.wait)
    assert clock.sleeps == [1.0, 2.0, 1.0, 2.0]


async def test_the_traceback_is_logged_at_debug_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    metrics, clock = AdapterMetrics(), Clock()
    runs = Runs(RuntimeError("boom"))
    await supervised(Work("w", runs.run), metrics, clock, runs.done.wait)
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.exc_info is not None
    assert record.exc_info[0] is RuntimeError


async def test_a_polled_task_keeps_its_source_fresh_and_a_failing_step_is_restarted() -> None:
    metrics, clock = AdapterMetrics(), Clock()
    looks: list[float] = []
    failures = [OSError("stale file handle")]

    def step() -> None:
        looks.append(clock.now)
        if len(looks) == 2:
            raise failures.pop()

    work = polled("serving-certificate", 5.0, step, metrics, Timing(stale_after=1.0), sleep=clock.sleep)
    assert work.source is not None
    assert work.source.bound == 10.0  # twice the interval, over the one-second floor

    async def three_looks() -> None:
        while len(looks) < 4:
            await asyncio.sleep(0)

    await supervised(work, metrics, clock, three_looks)
    assert work.source.failing_since is None  # the look after the restart succeeded
    assert work.source.last_success is not None
    sample = metrics.registry.get_sample_value
    assert sample("gpuscale_adapter_background_restarts_total", {"task": "serving-certificate"}) == 1
