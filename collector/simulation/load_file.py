"""``load_file`` of a simulation spec: simulated GPUs whose load another program sets while the collector runs.

The file holds a mapping of GPU index to load, 0 (idle) to 1 (full), in YAML (or JSON): ``{0: 0.65, 1: 0.65}``.
Whoever steers the load (the demo's workload) rewrites it, best by renaming a new file over it so that the
collector never reads half a file. A change counts from the moment the collector sees it (it looks at most every
0.1 s): windows already sampled keep the load they had, as on a real GPU, where work that arrives now cannot
change the past. GPUs the file does not name follow the spec's script.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from collector.errors import ConfigError
from collector.simulation.nvml import LoadCurve
from common.watched_file import WatchedFiles

log = logging.getLogger(__name__)

LOOK_EVERY = 0.1  # seconds between two looks at the file: a stat, negligible at this rate
KEEP = 60.0  # seconds of load changes kept; NVML's sample buffer, the furthest back anyone reads, is ~14 s


def parse_loads(text: str, source: str, gpus: int) -> dict[int, float]:
    """``{GPU index: load}`` from the file's text, strictly: anything else is an error naming the file and the entry."""
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of GPU index to load, got {data!r}")
    loads: dict[int, float] = {}
    for key, value in data.items():
        if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < gpus:
            raise ConfigError(f"{source}: GPU index must be from 0 to {gpus - 1}, got {key!r}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ConfigError(f"{source}: load of GPU {key} must be from 0 to 1, got {value!r}")
        loads[key] = float(value)
    return loads


class LoadFile:
    """A ``LoadCurve``: the file's loads from when each change was seen, else ``script``."""

    def __init__(self, path: Path, gpus: int, script: LoadCurve, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = path
        self._gpus = gpus
        self._script = script
        self._clock = clock
        self._start = clock()  # the simulation's time 0, as SimulatedNvml takes it from the same clock
        self._file = WatchedFiles(path)
        self._times: list[float] = [float("-inf")]
        self._loads: list[dict[int, float]] = [self._read(strict=True)]
        self._next_look = 0.0

    def __call__(self, index: int, t: float) -> float:
        self._look()
        loads = self._loads[bisect.bisect_right(self._times, t) - 1]
        return loads[index] if index in loads else self._script(index, t)

    def _read(self, strict: bool) -> dict[int, float]:
        try:
            return parse_loads(self._path.read_text(encoding="utf-8"), str(self._path), self._gpus)
        except OSError as e:
            problem = ConfigError(f"load file {self._path} cannot be read: {e.strerror or e}")
        except ConfigError as e:
            problem = e
        if strict:
            raise problem
        # a bad rewrite costs nothing but this line, once per change: the last good loads stay
        log.warning("%s; keeping the previous loads", problem)
        return self._loads[-1]

    def _look(self) -> None:
        now = self._clock() - self._start
        if now < self._next_look:
            return
        self._next_look = now + LOOK_EVERY
        if not self._file.changed():
            return
        self._times.append(now)
        self._loads.append(self._read(strict=False))
        while len(self._times) > 1 and self._times[1] < now - KEEP:
            del self._times[0], self._loads[0]
            self._times[0] = float("-inf")  # the oldest loads kept stand for everything before
