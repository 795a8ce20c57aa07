"""``serve`` from settings to summary: the step runner, the engine on a thread of its own, ``/metrics`` on the event
loop, and a clean stop at the end of ``--seconds``, SIGINT or SIGTERM (the step in progress finishes first).

The engine has a thread because a GPU step blocks until the GPU is done; scrapes are answered meanwhile.
``/metrics`` listens on the bounded site every server of the project uses (``common/connections.py``).
"""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Any, TextIO

from common import connections

from ..errors import LoadError
from .arrivals import Arrivals
from .engine import Engine
from .metrics import EngineMetrics
from .progress import Progress
from .scheduler import Scheduler
from .server import create_app
from .settings import ServeSpec
from .steps import MonotonicClock, SimulatedSteps, StepRunner


def step_runner(spec: ServeSpec) -> StepRunner:
    """The simulated runner, or the GPU's (PyTorch is imported then; LoadError when it or the GPU is missing)."""
    if spec.simulate:
        return SimulatedSteps(MonotonicClock(), spec.cost)
    from .gpu_steps import GemmSteps

    return GemmSteps(spec.hidden, spec.layers, spec.limits.max_step_tokens, spec.gpu)


def serve(spec: ServeSpec, progress: TextIO) -> dict[str, Any]:
    runner = step_runner(spec)  # before listening: a missing GPU is an error with nothing started
    metrics = EngineMetrics(spec.model_name)
    arrivals = Arrivals(spec.rates, spec.prompt, spec.output, spec.seed)
    engine = Engine(
        Scheduler(spec.limits), runner, arrivals, metrics, MonotonicClock(), Progress(progress, spec.interval)
    )
    try:
        asyncio.run(_serve(engine, spec, progress))
    except connections.ListenError as e:
        raise LoadError(str(e)) from None
    scheduler = engine.scheduler
    return engine.totals.summary(engine.elapsed, scheduler.waiting, scheduler.running)


async def _serve(engine: Engine, spec: ServeSpec, progress: TextIO) -> None:
    limits = connections.Limits()
    runner = connections.runner(create_app(engine.metrics.registry), limits, access_log=None)
    await runner.setup()
    try:
        site = connections.BoundedSite(runner, spec.host or None, spec.port, limits=limits)
        await connections.listen(site, f"{spec.host}:{spec.port} (--host, --port)")
        stop = threading.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        what = "simulated steps" if spec.simulate else f"GPU {spec.gpu}"
        progress.write(f"serving /metrics on http://{spec.host}:{spec.port}/metrics; {what}, {spec.seconds:g} s\n")
        progress.flush()
        await asyncio.to_thread(engine.run, spec.seconds, stop.is_set)
    finally:
        await runner.cleanup()
