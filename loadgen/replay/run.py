"""A replay of one trace: the clairvoyant bound first, then every policy over the same arrivals, two at a time on
two cores; a row for each with what the table, the JSON and the picture show."""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TextIO

from .bound import Bound, clairvoyant, fluid_floor, met, replay_plan
from .cost_model import CostModel
from .policies import (
    DEFAULT_MAX_REPLICAS,
    FORECAST,
    Policy,
    static_policy,
    with_max_replicas,
    with_min_replicas,
    without_forecast,
)
from .served import ServedMetrics
from .simulation import NAMESPACE, Outcome, Settings, Simulation, Timeline
from .trace import Arrival


@dataclass(frozen=True)
class ReplaySpec:
    arrivals: tuple[Arrival, ...]
    source: str  # where the arrivals come from, for the report
    settings: Settings
    cost: CostModel
    policies: tuple[Policy, ...]
    attainment: float = 0.99  # the share of requests the objective asks within the TTFT objective
    max_replicas: int | None = None  # None: twice the bound's peak, at least DEFAULT_MAX_REPLICAS
    min_replicas: int = 0  # a floor every autoscaled policy is given besides its own (0: their own)
    workers: int = field(default_factory=lambda: min(2, os.cpu_count() or 1))


@dataclass(frozen=True)
class Row:
    policy: str
    recommended_by: str
    gpu_seconds: float
    bound_gpu_seconds: float
    slo_attainment: float
    ttft_p50_seconds: float | None
    ttft_p90_seconds: float | None
    ttft_p99_seconds: float | None
    requests: int
    served: int
    waited_for_cold_start: int
    requests_cut: int
    scale_events: int
    peak_replicas: int
    timeline: Timeline

    @property
    def ratio(self) -> float:
        return self.gpu_seconds / self.bound_gpu_seconds if self.bound_gpu_seconds else math.inf


@dataclass(frozen=True)
class Report:
    spec: ReplaySpec
    bound: Row
    bound_per_replica: float
    fluid_floor: float
    rows: tuple[Row, ...]

    def best(self) -> tuple[Policy, Row] | None:
        """The policy with the fewest GPU-seconds among those that meet the objective."""
        met_rows = [(p, r) for p, r in zip(self.spec.policies, self.rows, strict=True)
                    if r.slo_attainment >= self.spec.attainment]  # fmt: skip
        return min(met_rows, key=lambda pr: pr[1].gpu_seconds) if met_rows else None


def row(policy: str, recommended_by: str, out: Outcome, settings: Settings, bound_gpu_seconds: float) -> Row:
    ttfts = sorted(r.first_token - r.arrival for r in out.requests if r.first_token is not None)

    def quantile(q: float) -> float | None:
        # a request without a first token is slower than any that had one
        n = len(out.requests)
        i = math.ceil(q * n) - 1
        return ttfts[i] if 0 <= i < len(ttfts) else (None if not n else math.inf)

    return Row(
        policy=policy,
        recommended_by=recommended_by,
        gpu_seconds=out.gpu_seconds,
        bound_gpu_seconds=bound_gpu_seconds,
        slo_attainment=met(out, settings),
        ttft_p50_seconds=quantile(0.5),
        ttft_p90_seconds=quantile(0.9),
        ttft_p99_seconds=quantile(0.99),
        requests=len(out.requests),
        served=sum(1 for r in out.requests if r.finished is not None),
        waited_for_cold_start=sum(1 for r in out.requests if r.held),
        requests_cut=sum(1 for r in out.requests if r.cut),
        scale_events=out.scale_events,
        peak_replicas=out.peak_replicas,
        timeline=out.timeline,
    )


def _run_policy(spec: ReplaySpec, policy: Policy, initial: int, bound_gpu_seconds: float) -> Row:
    def progress_of(what: str) -> Callable[[float], None]:
        end = spec.arrivals[-1].at if spec.arrivals else 0.0

        def progress(t: float) -> None:
            print(f"replay: {what}: {t / 60:.0f} of {end / 60:.0f} minutes", file=sys.stderr, flush=True)

        return progress

    history: list[tuple[float, float]] = []
    if FORECAST in policy.metrics:
        # yesterday: the same arrivals, the policy without the forecast, Prometheus recording what it reads
        yesterday = ServedMetrics(NAMESPACE)
        Simulation(spec.arrivals, without_forecast(policy), spec.settings, spec.cost, yesterday, initial,
                   progress=progress_of(f"{policy.name} (yesterday)")).run()  # fmt: skip
        history = yesterday.recorded
    sim = Simulation(spec.arrivals, policy, spec.settings, spec.cost, ServedMetrics(NAMESPACE, history=history),
                     initial, progress=progress_of(policy.name))  # fmt: skip
    return row(policy.name, policy.recommended_by, sim.run(), spec.settings, bound_gpu_seconds)


def _plan_outcome(spec: ReplaySpec, per_replica: float) -> Outcome:
    return replay_plan(spec.arrivals, spec.settings, spec.cost, ServedMetrics(NAMESPACE), per_replica)


def _initial(policy: Policy, start: int) -> int:
    """The replicas a policy holds at the trace's start: what the bound starts with, within the policy's bounds."""
    if policy.static_replicas is not None:
        return policy.static_replicas
    if policy.hpa is not None:
        return max(policy.hpa.min_replicas, min(policy.hpa.max_replicas, start))
    assert policy.keda is not None
    return max(policy.keda.min_replica_count, min(policy.keda.max_replica_count, start))


def replay(spec: ReplaySpec, out: TextIO = sys.stderr) -> Report:
    """The bound, then each policy of ``spec`` and static peak provisioning (the bound's peak, all the time)."""

    def say(line: str) -> None:
        print(f"replay: {line}", file=out, flush=True)

    say(f"{len(spec.arrivals):,} requests over {spec.arrivals[-1].at / 60:.0f} minutes from {spec.source}")
    with ProcessPoolExecutor(spec.workers) if spec.workers > 1 else contextlib.nullcontext() as pool:

        def evaluate(qs: Sequence[float]) -> list[Outcome]:
            if pool is None:
                return [_plan_outcome(spec, q) for q in qs]
            return list(pool.map(_plan_outcome, [spec] * len(qs), qs))

        bound: Bound = clairvoyant(spec.arrivals, spec.settings, spec.cost, evaluate, spec.attainment, progress=say)
        bound_seconds = bound.outcome.gpu_seconds
        bound_row = row("clairvoyant bound", "knows every arrival in advance", bound.outcome, spec.settings,
                        bound_seconds)  # fmt: skip
        start = bound.schedule[0][1] if bound.schedule else 1
        peak = max((n for _, n in bound.schedule), default=1)
        # a cap below what the traffic needs would fail every policy alike: the default leaves each twice the peak
        cap = (
            spec.max_replicas
            if spec.max_replicas is not None
            else max(DEFAULT_MAX_REPLICAS, 2 * peak, spec.min_replicas)
        )
        bounded = (with_min_replicas(with_max_replicas(p, cap), spec.min_replicas) for p in spec.policies)
        policies = (*bounded, static_policy(peak))
        spec = replace(spec, policies=policies, max_replicas=cap)
        jobs = [(p, _initial(p, start)) for p in policies]
        if pool is None:
            rows = tuple(_run_policy(spec, p, n, bound_seconds) for p, n in jobs)
        else:
            futures = [pool.submit(_run_policy, spec, p, n, bound_seconds) for p, n in jobs]
            rows = tuple(f.result() for f in futures)
    floor = fluid_floor(spec.arrivals, spec.cost, spec.settings.limits.max_batch)
    return Report(spec, bound_row, bound.per_replica, floor, rows)
