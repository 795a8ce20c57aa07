"""One replica of the chat Deployment: the engine of ``gpuscale-load serve --simulate`` (loadgen/serving: its
scheduler, its modelled steps and vLLM's metrics, the same code) on a thread of its own, with its /metrics on a port
of its own, as a vLLM pod serves it. Its requests come from the gateway through an ``Inbox``.
"""

from __future__ import annotations

import asyncio
import math
import threading

from aiohttp import web

from common import connections
from loadgen.serving.engine import Engine
from loadgen.serving.metrics import EngineMetrics
from loadgen.serving.request import Request
from loadgen.serving.scheduler import Scheduler
from loadgen.serving.server import create_app
from loadgen.serving.settings import ServeSpec
from loadgen.serving.steps import Clock, MonotonicClock, SimulatedSteps


class Inbox:
    """The engine's source of requests: the gateway puts them from the event loop's thread, the engine takes them on
    its own at its next look (after a step, or within its idle nap), each stamped on the engine's clock with the time
    it was handed over, as vLLM stamps a request when its server receives it."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or MonotonicClock()
        self._lock = threading.Lock()
        self._pending: list[tuple[Request, float]] = []  # with the time it was put, on the clock
        self._held: list[Request] = []  # every request put and not yet finished; the putting thread's alone

    def put(self, request: Request) -> None:
        with self._lock:
            self._pending.append((request, self._clock.now()))
        self._held.append(request)

    def next_time(self) -> float | None:
        """None while nothing waits to be taken (the engine naps); else 0, a time already past: take it now."""
        with self._lock:
            return 0.0 if self._pending else None

    def due(self, t: float) -> list[Request]:
        """Every request put so far, its arrival moved to the engine's time (``t``: the engine's now)."""
        with self._lock:
            pending, self._pending = self._pending, []
        origin = self._clock.now() - t  # the engine's time 0 on this clock
        for request, put in pending:
            request.arrival = put - origin
        return [request for request, _ in pending]

    def unfinished(self) -> list[Request]:
        """The requests put that do not have all their tokens yet: waiting here or in the engine, or running."""
        self._held = [r for r in self._held if r.generated < r.output]
        return list(self._held)


class EngineReplica:
    def __init__(self, pod: str, port: int, spec: ServeSpec, host: str = "127.0.0.1") -> None:
        """``spec``: the settings of ``gpuscale-load serve --simulate`` it runs with (its rate is not used: the
        gateway hands it its requests)."""
        self.pod = pod
        self.port = port
        self._host = host
        self.inbox = Inbox()
        clock = MonotonicClock()
        self._engine = Engine(Scheduler(spec.limits), SimulatedSteps(clock, spec.cost), self.inbox,
                              EngineMetrics(spec.model_name), clock)  # fmt: skip
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def finished(self) -> int:
        return self._engine.totals.finished

    @property
    def busy_seconds(self) -> float:
        """Seconds its engine spent in steps: what its GPU is busy for."""
        return self._engine.totals.busy_seconds

    async def start(self) -> None:
        """Its /metrics, then its engine, as a vLLM pod starts serving once its model has loaded."""
        limits = connections.Limits()
        self._runner = connections.runner(create_app(self._engine.metrics.registry), limits, access_log=None)
        await self._runner.setup()
        site = connections.BoundedSite(self._runner, self._host, self.port, limits=limits)
        try:
            await connections.listen(site, f"{self._host}:{self.port} ({self.pod}'s /metrics)")
        except connections.ListenError as e:
            raise RuntimeError(str(e)) from None
        self._thread = threading.Thread(target=self._engine.run, args=(math.inf, self._stop.is_set), name=self.pod,
                                        daemon=True)  # fmt: skip
        self._thread.start()

    async def stop(self) -> list[Request]:
        """Its engine ends after the step in progress and /metrics closes; the requests it had not finished come
        back as new ones, for the gateway to hand out again (their clients retry)."""
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        if self._runner is not None:
            await self._runner.cleanup()
        return [Request(r.id, r.arrival, r.prompt, r.output) for r in self.inbox.unfinished()]
