"""Run a load while reading the collector's /metrics, and check each series moved as that load should move it.

Idle first, then loaded: the verdict compares the median of each phase against the expectation for the kind and
duty cycle (for example tensor activity above 0.8 under a full GEMM and below 0.05 idle). Busy time is checked
exactly, partial loads included: the graphics-engine ratio within 0.1 of the duty cycle, and ``DCGM_FI_DEV_GPU_UTIL``
within 5 points of that ratio x100 where the GPU has GPM (within 10 points of the duty cycle where it has not).
"""

from __future__ import annotations

import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from .runner import LoadSpec, run_load
from .workloads import KINDS, open_device


@dataclass(frozen=True)
class Expectation:
    series: str
    idle: str  # human-readable bound, shown in the table
    loaded: str
    check_idle: Callable[[float], bool]
    check_loaded: LoadedCheck


# (loaded median, idle median, loaded medians of every series) → ok
LoadedCheck = Callable[[float, float, Mapping[str, float]], bool]
ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def _below(limit: float) -> tuple[str, Callable[[float], bool]]:
    return f"< {limit:g}", lambda v: v < limit


def _above(limit: float) -> tuple[str, LoadedCheck]:
    return f"> {limit:g}", lambda v, _idle, _all: v > limit


def _near(target: float, within: float) -> tuple[str, LoadedCheck]:
    return f"{target:g} ± {within:g}", lambda v, _idle, _all: abs(v - target) <= within


def _busy_percent(duty: float) -> tuple[str, LoadedCheck]:
    """The time-averaged utilization against GPM's measured busy ratio when the GPU has GPM, else the duty cycle."""

    def check(v: float, _idle: float, loaded: Mapping[str, float]) -> bool:
        if ENGINE in loaded:
            return abs(v - 100 * loaded[ENGINE]) <= 5
        return abs(v - 100 * duty) <= 10

    return f"{ENGINE} x100 ± 5 (or {100 * duty:g} ± 10 without GPM)", check


def expectations(kind: str, duty: float) -> list[Expectation]:
    def exp(
        series: str,
        idle: tuple[str, Callable[[float], bool]],
        loaded: tuple[str, LoadedCheck],
    ) -> Expectation:
        return Expectation(series, idle[0], loaded[0], idle[1], loaded[1])

    more_than_idle: tuple[str, LoadedCheck] = ("> idle", lambda v, idle, _all: v > idle)
    power: tuple[str, LoadedCheck] = ("> 1.3 x idle", lambda v, idle, _all: v > 1.3 * idle)
    common = [
        exp("DCGM_FI_DEV_GPU_UTIL", _below(10), _busy_percent(duty)),
        exp(ENGINE, _below(0.05), _near(duty, 0.1)),
        exp("DCGM_FI_PROF_SM_ACTIVE", _below(0.05), _above(0.5 * duty)),
        exp("DCGM_FI_DEV_POWER_USAGE", ("(baseline)", lambda v: True), power),
        exp("DCGM_FI_DEV_FB_USED", ("(baseline)", lambda v: True), more_than_idle),
    ]
    specific = {
        "gemm-bf16": [exp("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", _below(0.05), _above(0.8 * duty))],
        "gemm-fp16": [exp("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", _below(0.05), _above(0.8 * duty))],
        "fp32": [exp("DCGM_FI_PROF_PIPE_FP32_ACTIVE", _below(0.05), _above(0.1 * duty))],
        "fp64": [exp("DCGM_FI_PROF_PIPE_FP64_ACTIVE", _below(0.05), _above(0.1 * duty))],
        "memory": [exp("DCGM_FI_PROF_DRAM_ACTIVE", _below(0.05), _above(0.5 * duty))],
    }
    return common + specific[kind]


# dcgm-exporter 4.9's names (DCGM 4.7; the collector's default) of the series checked here → the 4.8 name and what
# to multiply by to get its unit back, so a page in either spelling is judged alike
_DCGM_4_9 = {
    "DCGM_FI_DEV_GPU_UTIL_RATIO": ("DCGM_FI_DEV_GPU_UTIL", 100.0),
    "DCGM_FI_DEV_BOARD_POWER_WATTS": ("DCGM_FI_DEV_POWER_USAGE", 1.0),
    "DCGM_FI_DEV_FB_USED_BYTES": ("DCGM_FI_DEV_FB_USED", 1 / (1024 * 1024)),
    "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0),
    "DCGM_FI_PROF_SM_UTIL_RATIO": ("DCGM_FI_PROF_SM_ACTIVE", 1.0),
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1.0),
    "DCGM_FI_PROF_DRAM_UTIL_RATIO": ("DCGM_FI_PROF_DRAM_ACTIVE", 1.0),
    "DCGM_FI_PROF_FP32_UTIL_RATIO": ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", 1.0),
    "DCGM_FI_PROF_FP64_UTIL_RATIO": ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", 1.0),
}


def read_gpu_series(url: str, gpu: str, timeout: float = 5.0) -> dict[str, float]:
    """Device-wide values of one GPU (series without a pod label) from a Prometheus text page; a series under
    dcgm-exporter 4.9's name is also given under its 4.8 name, in that name's unit."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("gpu") == gpu and "pod" not in labels and "GPU_I_ID" not in labels:
                out[sample.name] = sample.value
                if sample.name in _DCGM_4_9:
                    old, factor = _DCGM_4_9[sample.name]
                    out.setdefault(old, sample.value * factor)
    return out


@dataclass
class Verdict:
    rows: list[dict[str, Any]]

    @property
    def ok(self) -> bool:
        return all(r["ok"] for r in self.rows)

    def table(self) -> str:
        lines = [
            "| series | expected idle | seen idle | expected loaded | seen loaded | ok |",
            "|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            lines.append(
                f"| {r['series']} | {r['expected_idle']} | {_fmt(r['idle'])} | {r['expected_loaded']} | "
                f"{_fmt(r['loaded'])} | {'yes' if r['ok'] else 'NO: ' + r['why']} |"
            )
        return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "absent" if value is None else f"{value:.4g}"


def _median(samples: list[dict[str, float]], series: str) -> float | None:
    values = [s[series] for s in samples if series in s]
    return statistics.median(values) if values else None


def judge(kind: str, duty: float, idle: list[dict[str, float]], loaded: list[dict[str, float]]) -> Verdict:
    rows = []
    medians = {name: m for name in {n for s in loaded for n in s} if (m := _median(loaded, name)) is not None}
    for e in expectations(kind, duty):
        i, v = _median(idle, e.series), medians.get(e.series)
        why = ""
        if i is None or v is None:
            why = "series absent"
        elif not e.check_idle(i):
            why = f"idle {i:.4g} not {e.idle}"
        elif not e.check_loaded(v, i, medians):
            why = f"loaded {v:.4g} not {e.loaded}"
        rows.append(
            {
                "series": e.series,
                "expected_idle": e.idle,
                "idle": i,
                "expected_loaded": e.loaded,
                "loaded": v,
                "ok": not why,
                "why": why,
            }
        )
    return Verdict(rows)


def sample_during(url: str, gpu: str, seconds: float, every: float = 0.5) -> list[dict[str, float]]:
    samples, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append(read_gpu_series(url, gpu))
        time.sleep(every)
    return samples


def validate(spec: LoadSpec, url: str, idle_seconds: float = 8.0, ramp_seconds: float = 4.0) -> Verdict:
    open_device(KINDS[spec.kind], spec.size, spec.gpu)  # a load that cannot run fails before any sampling
    idle = sample_during(url, str(spec.gpu), idle_seconds)
    result: dict[str, Any] = {}
    load = threading.Thread(target=lambda: result.update(run_load(spec)), daemon=True)
    load.start()
    time.sleep(ramp_seconds)  # the first GPM interval and NVML's utilization window must cover the load
    loaded = sample_during(url, str(spec.gpu), max(1.0, spec.seconds - ramp_seconds - 1.0))
    load.join()
    return judge(spec.kind, spec.duty, idle, loaded)
