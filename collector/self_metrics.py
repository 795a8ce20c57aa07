"""The collector's own health as metric families: collection time, errors by kind, unsupported fields, and the state
of its background work (``Background``)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from collector.exposition import Family, Labels
from common.freshness import Sources

PREFIX = "gpuscale_collector_"
# the path whose answer fails while a source is stale: the DaemonSet's readiness probe
PROBE = "/health"


@dataclass
class SelfStats:
    """Mutated only by the collection thread; read when families are built on that same thread."""

    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    collections: int = 0
    cpu_seconds: float = 0.0
    last_duration: float = 0.0
    last_success: float = 0.0
    nvml_up: bool = False
    reloads: int = 0
    reload_errors: int = 0

    def record_cycle(self, duration: float, cpu: float, errors: Counter[tuple[str, str]], now: float) -> None:
        self.collections += 1
        self.cpu_seconds += cpu
        self.last_duration = duration
        self.errors.update(errors)
        self.last_success = now


def _one(name: str, type_: str, help_: str, value: float) -> Family:
    return Family(PREFIX + name, type_, help_, (((), value),))


def self_families(
    stats: SelfStats,
    unsupported: dict[tuple[int, str], str],
    gpus: int,
    point_sampled: set[tuple[int, str]] | None = None,
) -> list[Family]:
    families = [
        _one("nvml_up", "gauge", "1 when NVML is initialised and GPUs can be read.", float(stats.nvml_up)),
        _one("gpus", "gauge", "GPUs found by NVML.", float(gpus)),
        _one("collections_total", "counter", "Collection cycles completed.", float(stats.collections)),
        _one(
            "collection_duration_seconds",
            "gauge",
            "Wall time of the last collection cycle.",
            stats.last_duration,
        ),
        _one(
            "collection_cpu_seconds_total",
            "counter",
            "CPU time spent in collection cycles.",
            stats.cpu_seconds,
        ),
        _one(
            "last_success_timestamp_seconds",
            "gauge",
            "Unix time of the last completed collection cycle.",
            stats.last_success,
        ),
        _one("config_reloads_total", "counter", "Counters file reloads that took effect.", float(stats.reloads)),
        _one(
            "config_reload_errors_total",
            "counter",
            "Counters file reloads refused because the new file was broken.",
            float(stats.reload_errors),
        ),
    ]
    if stats.errors:
        samples: tuple[tuple[Labels, float], ...] = tuple(
            ((("gpu", gpu), ("kind", kind)), float(n)) for (gpu, kind), n in sorted(stats.errors.items())
        )
        families.append(
            Family(
                PREFIX + "errors_total",
                "counter",
                "NVML errors by GPU (empty: not GPU-specific) and kind.",
                samples,
            )
        )
    if unsupported:
        samples = tuple(
            ((("gpu", str(gpu)), ("field", name), ("reason", why)), 1.0)
            for (gpu, name), why in sorted(unsupported.items())
        )
        families.append(
            Family(
                PREFIX + "field_unsupported",
                "gauge",
                "Fields the GPU or driver does not provide; their series are absent.",
                samples,
            )
        )
    if point_sampled:
        families.append(
            Family(
                PREFIX + "utilization_point_sampled",
                "gauge",
                "Utilizations served as NVML's instantaneous value, not an interval mean: the GPU keeps no samples.",
                tuple(((("gpu", str(gpu)), ("field", name)), 1.0) for gpu, name in sorted(point_sampled)),
            )
        )
    return families


class Background:
    """What the collector keeps current in the background (the collection cycle, the kubelet's pod-resources, its pod
    and ResourceSlice watches, the counters ConfigMap, the GPUs bound to the driver) and how often each piece of
    background work had to start again: what ``common/supervisor.py`` reports to, what ``/health`` and the
    self-metrics read."""

    def __init__(self) -> None:
        self._sources = Sources(PREFIX.rstrip("_"), PROBE)
        self._restarts: Counter[str] = Counter()
        self._lock = threading.Lock()  # restarts are counted from the event loop and from the collector's threads

    @property
    def sources(self) -> Sources:
        return self._sources

    def restarted(self, task: str) -> None:
        with self._lock:
            self._restarts[task] += 1

    def problems(self) -> list[str]:
        """Why each stale source is stale (empty: none is)."""
        return [problem for source in self._sources if (problem := source.problem()) is not None]

    def families(self) -> list[Family]:
        sources = list(self._sources)
        with self._lock:
            restarts = sorted(self._restarts.items())
        families = []
        if sources:
            families.append(
                Family(
                    PREFIX + "source_last_success_timestamp_seconds",
                    "gauge",
                    "When a background source (pod watch, counters ConfigMap, GPU bind watch, pod-resources) last "
                    "succeeded.",
                    tuple(((("source", s.name),), s.last_success) for s in sources if s.last_success is not None),
                )
            )
            families.append(
                Family(
                    PREFIX + "source_stale",
                    "gauge",
                    f"1 while a background source has been failing for longer than its bound (then {PROBE} answers "
                    "503), else 0.",
                    tuple(((("source", s.name),), float(s.stale())) for s in sources),
                )
            )
        if restarts:
            families.append(
                Family(
                    PREFIX + "background_restarts_total",
                    "counter",
                    "Background work started again after it failed unexpectedly, by task.",
                    tuple(((("task", task),), float(n)) for task, n in restarts),
                )
            )
        return families
