"""Both programs' background work, each run under ``supervise`` (a task) or ``guarded`` (a thread's step) so that
none of it can stop unseen.

The loops inside already survive the failures they expect (``common/list_watch.py``, a failed relist, a file that
does not parse); this is the net under them. A task that ends for any reason but its own cancellation (an exception
nobody expected, a return, a ``CancelledError`` from inside) is logged in one line (with its traceback when debug
logging is on), counted, marks its source as failing (``freshness.py``: the readiness probe fails if that lasts), and
is started again after a back-off: 1 s doubling to ``max_backoff``, back to 1 s after a run that lasted
``HEALTHY_RUN_SECONDS``. A thread's step that raises is logged and counted the same way, and its loop goes on.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from common.backoff import Backoff
from common.freshness import Freshness, Sources, Timing
from common.log_limit import LogLimit, left_out

log = logging.getLogger(__name__)

HEALTHY_RUN_SECONDS = 60.0
T = TypeVar("T")


class Supervised(Protocol):
    """Where a program keeps the state of its background work: the sources, and a count of restarts by task."""

    @property
    def sources(self) -> Sources: ...

    def restarted(self, task: str) -> None: ...


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
    metrics: Supervised,
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
        metrics.restarted(work.name)
        if work.source is not None:
            work.source.failed(f"its background task stopped ({_why(error)})")
        await sleep(wait)


def polled(
    name: str,
    interval: float,
    step: Callable[[], object],
    metrics: Supervised,
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


def start(work: Iterable[Work], metrics: Supervised, timing: Timing) -> list[asyncio.Task[None]]:
    return [asyncio.create_task(supervise(w, metrics, timing.max_backoff), name=w.name) for w in work]


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class Guard:
    """The net under a thread's loop (the collection cycle, the shared-GPU process sampler):
    ``step()`` runs one round and returns its result, or None when the round raised. The exception is logged (once a
    minute per kind, the traceback when debug logging is on), counted as a restart of ``name`` and marks ``source``
    as failing; the next round that works marks it fresh again. A thread that died instead would leave its data
    frozen with nothing said."""

    def __init__(
        self,
        name: str,
        metrics: Supervised | None,
        source: Freshness | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._metrics = metrics
        self.source = source
        self._log_limit = LogLimit(60.0, clock)

    def step(self, round_: Callable[[], T]) -> T | None:
        try:
            result = round_()
        except Exception as e:  # whatever it was, the thread must go on and say so
            held = self._log_limit.allow(type(e).__name__)
            if held is not None:
                log.error(
                    "%s failed (%s); trying again next round%s",
                    self.name,
                    _why(e),
                    left_out(held, self._log_limit.interval),
                    exc_info=e if log.isEnabledFor(logging.DEBUG) else None,
                )
            if self._metrics is not None:
                self._metrics.restarted(self.name)
            if self.source is not None:
                self.source.failed(f"it failed ({_why(e)})")
            return None
        if self.source is not None:
            self.source.succeeded()
        return result
