"""The work the Deployment serves: a total, in GPUs' worth of busy time, spread evenly over its replicas.

Each replica's GPU is busy ``total / replicas`` of the time (all of it at most), as identical workers behind a load
balancer share requests: utilization per pod falls as replicas are added. A GPU becomes busy one of two ways:
on simulated GPUs the busy fractions go to the collector's load file (``SimulatedWork``), on real GPUs each replica
runs ``gpuscale-load`` at that duty (``demo/gpu_work.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml

from demo.deployment import Deployment, Gpu


@dataclass(frozen=True)
class LoadScript:
    """The total over time: ``steps`` of (from this second, this many GPUs' worth), in order."""

    steps: tuple[tuple[float, float], ...]

    def total(self, t: float) -> float:
        return next((total for start, total in reversed(self.steps) if t >= start), self.steps[0][1])

    def stretched(self, factor: float) -> LoadScript:
        return LoadScript(tuple((start * factor, total) for start, total in self.steps))

    def describe(self) -> str:
        return ", ".join(f"{total:g} GPU from {start:.0f} s" for start, total in self.steps)


def duty(total: float, replicas: int) -> float:
    """What each of ``replicas`` GPUs is busy when they share ``total`` GPUs' worth of work evenly."""
    return min(1.0, total / replicas) if replicas else 0.0


class Work(Protocol):
    """What makes the GPUs busy: started once, then told every GPU's busy fraction whenever one changes."""

    async def start(self) -> None: ...

    async def set(self, busy: Mapping[Gpu, float]) -> None: ...

    async def close(self) -> None: ...


class SimulatedWork:
    """Simulated GPUs: every GPU's busy fraction in the collector's load file (collector/simulation/load_file.py)."""

    def __init__(self, path: Path, gpus: Sequence[Gpu]) -> None:
        self.path = path
        self._gpus = list(gpus)
        self.write({})

    def write(self, busy: Mapping[Gpu, float]) -> None:
        # renamed over the old file, so the collector never reads half of one
        new = self.path.with_name(self.path.name + ".new")
        new.write_text(yaml.safe_dump({g.index: round(busy.get(g, 0.0), 4) for g in self._gpus}))
        os.replace(new, self.path)

    async def start(self) -> None:
        return None

    async def set(self, busy: Mapping[Gpu, float]) -> None:
        self.write(busy)

    async def close(self) -> None:
        return None


class SharedWork:
    """One ``Work`` that several Deployments keep busy: each sets its own GPUs through its ``part``, and the GPUs the
    others set stay as they were."""

    def __init__(self, work: Work) -> None:
        self._work = work
        self._parts: dict[str, dict[Gpu, float]] = {}

    def part(self, name: str) -> Work:
        return _Part(self, name)

    async def set_part(self, name: str, busy: Mapping[Gpu, float]) -> None:
        if self._parts.get(name) == busy:
            return
        self._parts[name] = dict(busy)
        await self._work.set({gpu: load for part in self._parts.values() for gpu, load in part.items()})


class _Part:
    """A ``Work`` that is one Deployment's share of a ``SharedWork``; the shared one is started and closed by its
    owner, not by a part."""

    def __init__(self, shared: SharedWork, name: str) -> None:
        self._shared = shared
        self._name = name

    async def start(self) -> None:
        return None

    async def set(self, busy: Mapping[Gpu, float]) -> None:
        await self._shared.set_part(self._name, busy)

    async def close(self) -> None:
        return None


class Workload:
    """Keeps the GPUs of ``deployment``'s replicas busy as ``script`` and the replica count say."""

    def __init__(self, script: LoadScript, deployment: Deployment, work: Work) -> None:
        self.script = script
        self._deployment = deployment
        self._work = work
        self._busy: dict[Gpu, float] | None = None

    async def update(self, t: float) -> float:
        """Spread the total of second ``t`` over the replicas there are now; the duty each replica got."""
        gpus = list(self._deployment.pods.values())
        each = duty(self.script.total(t), len(gpus))
        busy = dict.fromkeys(gpus, each)
        if busy != self._busy:
            await self._work.set(busy)
            self._busy = busy
        return each
