"""``--simulate-spec``: simulated GPUs described in a YAML file (count, MIG layouts, processes, a load script)."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from collector.errors import ConfigError
from collector.simulation.load_file import LoadFile
from collector.simulation.nvml import LoadCurve, SimulatedNvml, default_load


@dataclass(frozen=True)
class SimulationSpec:
    """What ``--simulate-spec`` describes: GPUs, MIG layouts, processes and a load script per GPU.

    ```yaml
    gpus: 4
    mig: {3: [1g.18gb, 3g.71gb]}            # GPU index → instance profiles
    processes: {1: {501: 0.6, 502: 0.3}}    # GPU index → {pid: share of the GPU's time}
    load: {0: [[0, 0.05], [20, 0.95], [60, 0.95], [70, 0.05]]}   # GPU index → [seconds, load] points
    repeat: 90                              # the script starts over after this many seconds (optional)
    period: 0.5                             # busy for load x period of every period; or {GPU index: seconds}
    load_file: loads.yaml                   # {GPU index: load} that another program rewrites (simulation/load_file.py)
    absent: {1: [[30, 60]]}                 # GPU index → [from, until) seconds it is unbound from the driver
    ```
    GPUs without a script follow ``default_load``; load between points is interpolated linearly. Without a period
    a GPU is evenly busy at its load. A ``load_file`` (relative to the spec's directory) overrides the script for
    the GPUs it names, from the moment each rewrite is seen.
    """

    gpus: int
    mig: dict[int, list[str]] = field(default_factory=dict)
    processes: dict[int, dict[int, float]] = field(default_factory=dict)
    load: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    repeat: float | None = None
    period: float | dict[int, float] = 0.0
    load_file: str | None = None
    absent: dict[int, list[tuple[float, float]]] = field(default_factory=dict)

    def unbound(self, index: int, t: float) -> bool:
        return any(start <= t < end for start, end in self.absent.get(index, ()))

    def curve(self) -> LoadCurve:
        def load(index: int, t: float) -> float:
            points = self.load.get(index)
            if not points:
                return default_load(index, t)
            if self.repeat:
                t %= self.repeat
            if t <= points[0][0]:
                return points[0][1]
            for (t0, v0), (t1, v1) in itertools.pairwise(points):
                if t <= t1:
                    return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1
            return points[-1][1]

        return load

    def build(self, **kwargs: Any) -> SimulatedNvml:
        curve = self.curve()
        if self.load_file is not None:
            curve = LoadFile(Path(self.load_file), self.gpus, curve, clock=kwargs.get("clock", time.monotonic))
        return SimulatedNvml(
            self.gpus, load=curve, mig=self.mig, processes=self.processes, period=self.period,
            absent=self.unbound if self.absent else None, **kwargs,
        )  # fmt: skip


def parse_spec(data: Any, source: str) -> SimulationSpec:
    """A spec from parsed YAML, strictly: an unknown key or a value out of range is an error naming it."""

    def fail(problem: str) -> ConfigError:
        return ConfigError(f"{source}: {problem}")

    if not isinstance(data, dict):
        raise fail("expected a mapping with 'gpus'")
    unknown = set(data) - {"gpus", "mig", "processes", "load", "repeat", "period", "load_file", "absent"}
    if unknown:
        raise fail(
            f"unknown key {sorted(unknown)[0]!r}; expected gpus, mig, processes, load, repeat, period, load_file, "
            "absent"
        )
    gpus = data.get("gpus")
    if not isinstance(gpus, int) or not 1 <= gpus <= 64:
        raise fail(f"'gpus' must be a whole number from 1 to 64, got {gpus!r}")

    def gpu_key(key: Any, where: str) -> int:
        if not isinstance(key, int) or not 0 <= key < gpus:
            raise fail(f"{where}: GPU index must be from 0 to {gpus - 1}, got {key!r}")
        return key

    mig = {gpu_key(k, "mig"): [str(p) for p in v] for k, v in (data.get("mig") or {}).items()}
    for index, profiles in mig.items():
        for p in profiles:
            if not re.fullmatch(r"\d+g\.\d+gb", p):
                raise fail(f"mig.{index}: profile must look like 1g.18gb, got {p!r}")
    processes: dict[int, dict[int, float]] = {}
    for k, v in (data.get("processes") or {}).items():
        shares = {int(pid): float(share) for pid, share in (v or {}).items()}
        if any(s < 0 for s in shares.values()) or sum(shares.values()) > 1.0 + 1e-9:
            raise fail(f"processes.{k}: shares must be >= 0 and add up to at most 1, got {v!r}")
        processes[gpu_key(k, "processes")] = shares
    load: dict[int, list[tuple[float, float]]] = {}
    for k, points in (data.get("load") or {}).items():
        try:
            parsed = [(float(t), float(v)) for t, v in points]
        except (TypeError, ValueError):
            raise fail(f"load.{k}: expected a list of [seconds, load] pairs, got {points!r}") from None
        if not parsed or any(not 0 <= v <= 1 for _, v in parsed) or parsed != sorted(parsed):
            raise fail(f"load.{k}: loads must be within 0..1 and times ascending, got {points!r}")
        load[gpu_key(k, "load")] = parsed
    repeat = data.get("repeat")
    if repeat is not None and (not isinstance(repeat, int | float) or repeat <= 0):
        raise fail(f"'repeat' must be a positive number of seconds, got {repeat!r}")
    load_file = data.get("load_file")
    if load_file is not None and (not isinstance(load_file, str) or not load_file):
        raise fail(f"'load_file' must be a file name, got {load_file!r}")
    return SimulationSpec(
        gpus,
        mig,
        processes,
        load,
        float(repeat) if repeat else None,
        _period(data.get("period"), fail, gpu_key),
        load_file,
        _absent(data.get("absent"), fail, gpu_key),
    )


def _period(
    value: Any, fail: Callable[[str], ConfigError], gpu_key: Callable[[Any, str], int]
) -> float | dict[int, float]:
    """``period``: seconds for every GPU, or a mapping of GPU index to seconds; each >= 0 (0: evenly busy)."""

    def seconds(v: Any, where: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 3600:
            raise fail(f"{where} must be a number of seconds from 0 to 3600, got {v!r}")
        return float(v)

    if value is None:
        return 0.0
    if isinstance(value, dict):
        return {gpu_key(k, "period"): seconds(v, f"period.{k}") for k, v in value.items()}
    return seconds(value, "'period'")


def _absent(
    value: Any, fail: Callable[[str], ConfigError], gpu_key: Callable[[Any, str], int]
) -> dict[int, list[tuple[float, float]]]:
    """``absent``: GPU index → [[from, until], ...] seconds during which the GPU is unbound from the driver."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(f"'absent' must map GPU indexes to [[from, until], ...] seconds, got {value!r}")
    out = {}
    for k, spans in value.items():
        try:
            parsed = [(float(start), float(end)) for start, end in spans]
        except (TypeError, ValueError):
            raise fail(f"absent.{k}: expected a list of [from, until] seconds, got {spans!r}") from None
        if any(not 0 <= start < end for start, end in parsed):
            raise fail(f"absent.{k}: each span must start at 0 or later and end after it starts, got {spans!r}")
        out[gpu_key(k, "absent")] = parsed
    return out


def load_spec(path: str) -> SimulationSpec:
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"simulation spec {path} does not exist") from None
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"simulation spec {path} cannot be read: {e}") from e
    spec = parse_spec(data, path)
    if spec.load_file is not None:
        spec = replace(spec, load_file=str(Path(path).parent / spec.load_file))  # an absolute name stays as it is
    return spec
