"""The adapter's background tasks, each run under ``supervise`` so that none of them can stop unseen.

The loops inside already survive the failures they expect (``common/list_watch.py``, a failed relist, a file that
does not parse); this is the net under them. A task that ends for any reason but its own cancellation (an exception
nobody expected, a return, a ``CancelledError`` from inside) is logged in one line (with its traceback at ``-v=4``),
counted, marks its source as failing (``freshness.py``: ``/readyz`` fails if that lasts), and is started again after
a back-off: 1 s doubling to ``max_backoff``, back to 1 s after a run that lasted ``HEALTHY_RUN_SECONDS``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from adapter.freshness import Freshness, Timing
from adapter.self_metrics import AdapterMetrics
from common.backoff import Backoff

log = logging.getLogger(__name__)

HEALTHY_RUN_SECONDS = 60.0


@dataclass(frozen=True)
class Work:
    """A background task: its name (in logs and metrics), how to start it, and the source it keeps fresh."""

    name: str
    run: Callable[[], Awaitable[None]]
    source: Freshness | None = None


def _stopping() -> bool:
    """Whether this task itself is being cancelled (not a CancelledError raised by what it awaited)."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def _why(error: BaseException | None) -> str:
    if error is None:
        return "it returned"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


async def supervise(
    work: Work,
    metrics: AdapterMetrics,
    max_backoff: float = 30.0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    jitter: Callable[[], float] = random.random,
) -> None:
    """Run ``work`` until cancelled, starting it again whenever it ends."""
    backoff = Backoff(1.0, max_backoff, jitter)
    while True:
        started = clock()
        error: BaseException | None = None
        try:
            await work.run()
        except asyncio.CancelledError as e:
            if _stopping():
                raise
            error = e
        except Exception as e:  # whatever it was, the data this task keeps current must not go stale unseen
            error = e
        if clock() - started >= HEALTHY_RUN_SECONDS:
            backoff.reset()
        wait = backoff.next()
        log.error(
            "background task %s stopped (%s); starting it again in %.1f s",
            work.name,
            _why(error),
            wait,
            exc_info=error if error is not None and log.isEnabledFor(logging.DEBUG) else None,
        )
        metrics.background_restarts.labels(work.name).inc()
        if work.source is not None:
            work.source.failed(f"its background task stopped ({_why(error)})")
        await sleep(wait)


def polled(
    name: str,
    interval: float,
    step: Callable[[], object],
    metrics: AdapterMetrics,
    timing: Timing,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Work:
    """A task that runs ``step`` every ``interval`` seconds (a look at files), as the source ``name``: each look
    that completes keeps it fresh."""
    source = metrics.sources.add(name, timing.bound(interval))

    async def run() -> None:
        while True:
            await sleep(interval)
            step()
            source.succeeded()

    return Work(name, run, source)


def start(work: Iterable[Work], metrics: AdapterMetrics, timing: Timing) -> list[asyncio.Task[None]]:
    return [asyncio.create_task(supervise(w, metrics, timing.max_backoff), name=w.name) for w in work]


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
