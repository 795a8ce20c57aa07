"""Run a load for a duration at a duty cycle: busy for dutyxperiod, idle for the rest, period after period."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from .workloads import KINDS, open_device


@dataclass(frozen=True)
class LoadSpec:
    kind: str
    seconds: float
    duty: float = 1.0  # fraction of each period the GPU is kept busy
    size: int = 8192
    gpu: int = 0
    period: float = 0.1


def run_load(
    spec: LoadSpec,
    progress: TextIO | None = None,
    stop: Callable[[], bool] = lambda: False,
    duty: Callable[[], float] | None = None,
) -> dict[str, Any]:
    """``duty``, when given, is asked at every period instead of ``spec.duty`` (``--duty-file``)."""
    kind = KINDS[spec.kind]
    torch, device = open_device(kind, spec.size, spec.gpu)
    step = kind.build(torch, device, spec.size)
    step()
    torch.cuda.synchronize(device)
    if progress is not None:  # wall-clock markers, so other tools can time what follows the load
        progress.write(f"load started at {time.time():.3f}\n")
    started = time.monotonic()
    steps, busy, next_report = 0, 0.0, started + 1.0
    while not stop():
        now = time.monotonic()
        if now - started >= spec.seconds:
            break
        period_start = now
        busy_for = (spec.duty if duty is None else duty()) * spec.period
        while time.monotonic() - period_start < busy_for:
            step()
            torch.cuda.synchronize(device)
            steps += 1
        busy += time.monotonic() - period_start
        rest = spec.period - (time.monotonic() - period_start)
        if rest > 0:
            time.sleep(rest)
        if progress is not None and time.monotonic() >= next_report:
            elapsed = time.monotonic() - started
            progress.write(
                f"\r{spec.kind} on GPU {spec.gpu}: {elapsed:5.1f}/{spec.seconds:.0f} s, "
                f"busy {100 * busy / elapsed:5.1f} %, {steps} steps"
            )
            progress.flush()
            next_report += 1.0
    torch.cuda.synchronize(device)
    elapsed = time.monotonic() - started
    if progress is not None:
        progress.write(f"\nload stopped at {time.time():.3f}\n")
    return {"kind": spec.kind, "seconds": elapsed, "steps": steps, "busy_fraction": busy / max(elapsed, 1e-9)}
