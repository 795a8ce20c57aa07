"""The clairvoyant bound: the fewest GPU-seconds found for a replica schedule that knows every arrival in advance,
starts each pod a cold start before it is needed, and meets the same objective as the policies (``attainment`` of
the requests within the TTFT objective).

The schedule is built from the arrivals alone, for a number ``q`` of requests per second that one replica is given:
1. the trace is cut into ``interval``-second bins; bin k needs ``ceil(rate_k / q)`` replicas, where ``rate_k`` is the
   highest arrival rate of bins k-1, k and k+1 (a burst at a bin's edge is served by both sides);
2. a valley shorter than the cold start is filled: a replica that would be deleted and needed again before a new
   one could load is kept (keeping it costs less than loading another);
3. pods are created a cold start before the bin that needs them and deleted when no bin within a cold start needs
   them: the Deployment holds, at time t, the most any bin in ``[t, t + cold_start]`` needs.

``q`` is then searched (``clairvoyant``) for the largest that meets the objective in a replay of the schedule: the
same simulation, replicas, gateway and lifecycle as the policies', only the autoscaler replaced by the schedule. The
bound is that schedule's GPU-seconds. It is a schedule that exists, so the best possible is at or below
it; how far below is not known. ``fluid_floor`` is a floor no schedule can beat: the GPU time of the work alone,
every replica always at its most efficient batch, with no cold start, no idle time and no latency objective.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .cost_model import CostModel
from .simulation import Metrics, Outcome, Settings, Simulation
from .trace import Arrival

INTERVAL = 10.0  # seconds: the schedule's bins
LOWEST, HIGHEST = 0.001, 50.0  # requests per second per replica: the search stays within
ROUNDS = 5  # the bracket's ends, 16 apart, come to 16 ** (1 / 3 ** 5) apart: 1.1 %


@dataclass(frozen=True)
class NoAutoscaler:
    """The policy a schedule replaces: no HPA, no ScaledObject."""

    name: str = "clairvoyant bound"
    hpa: None = None
    keda: None = None


@dataclass(frozen=True)
class Bound:
    outcome: Outcome
    per_replica: float  # q: requests per second a replica is given
    schedule: tuple[tuple[float, int], ...]
    tries: int


def needs(arrivals: Sequence[Arrival], per_replica: float, interval: float = INTERVAL) -> list[int]:
    """Replicas each bin needs at ``per_replica`` requests per second, valleys not filled."""
    if not arrivals:
        return []
    bins = [0] * (int(arrivals[-1].at // interval) + 1)
    for a in arrivals:
        bins[int(a.at // interval)] += 1
    rates = [n / interval for n in bins]
    peak = [max(rates[max(0, k - 1) : k + 2]) for k in range(len(rates))]
    return [max(1, math.ceil(r / per_replica - 1e-9)) for r in peak]


def fill_valleys(need: Sequence[int], span: int) -> list[int]:
    """Each bin at least the lower of the most needed within ``span`` bins before it and within ``span`` after: a
    dip shorter than ``span`` bins keeps its replicas."""
    out = []
    for k, n in enumerate(need):
        before = max(need[max(0, k - span) : k + 1])
        after = max(need[k : k + span + 1])
        out.append(max(n, min(before, after)))
    return out


def schedule(need: Sequence[int], interval: float, cold_start: float) -> list[tuple[float, int]]:
    """(time, replicas): at t the Deployment holds the most any bin starting in ``[t, t + cold_start]`` needs. The
    first bin's replicas are there at the start (``initial``); the steps follow."""
    ahead = math.ceil(cold_start / interval)
    steps: list[tuple[float, int]] = []
    last = None
    for k in range(len(need)):
        n = max(need[k : k + ahead + 1])
        if n != last:
            steps.append((k * interval, n))
            last = n
    # a rise is started a cold start early: at t - cold_start its pods are created (at the bin's own time when that
    # falls before 0, for the replicas the replay starts with)
    return steps


def plan(arrivals: Sequence[Arrival], cold_start: float, per_replica: float) -> list[tuple[float, int]]:
    """The schedule of the family above for ``per_replica`` requests a second a replica."""
    span = math.ceil(cold_start / INTERVAL)
    return schedule(fill_valleys(needs(arrivals, per_replica), span), INTERVAL, cold_start)


def replay_plan(
    arrivals: Sequence[Arrival], settings: Settings, cost: CostModel, metrics: Metrics, per_replica: float
) -> Outcome:
    """The schedule for ``per_replica`` replayed: the replicas its first step holds at the start, then its steps."""
    steps = plan(arrivals, settings.cold_start, per_replica)
    initial = steps[0][1] if steps else 1
    return Simulation(arrivals, NoAutoscaler(), settings, cost, metrics, initial, schedule=steps[1:]).run()


Evaluate = Callable[[Sequence[float]], list[Outcome]]


def clairvoyant(
    arrivals: Sequence[Arrival],
    settings: Settings,
    cost: CostModel,
    evaluate: Evaluate,
    attainment: float,
    progress: Callable[[str], None] | None = None,
) -> Bound:
    """The cheapest schedule of the family above meeting ``attainment`` (0-1) within ``settings.ttft_objective``.

    ``evaluate`` replays the plans of several ``per_replica`` values (``replay_plan``), two at once on two cores.
    The search starts from the fluid floor's rate, requests over the floor's GPU-seconds: no replica serves more, so
    it is the top of the bracket; the bottom is a sixteenth of it (made lower while it fails). Each round replays
    the two points that cut the bracket's logarithm in three and keeps the third that holds the boundary between
    meeting the objective and not.
    """
    tries = 0
    best: tuple[Outcome, float] | None = None

    def attempt(qs: Sequence[float]) -> list[bool]:
        nonlocal tries, best
        tries += len(qs)
        outcomes = evaluate(qs)
        ok = []
        for q, out in zip(qs, outcomes, strict=True):
            share = met(out, settings)
            ok.append(share >= attainment)
            if ok[-1] and (best is None or out.gpu_seconds < best[0].gpu_seconds):
                best = (out, q)
            if progress is not None:
                progress(f"bound: {q:.3f} requests/s a replica: {share:.4f} within the objective, "
                         f"{out.gpu_seconds:,.0f} GPU-seconds")  # fmt: skip
        return ok

    floor = fluid_floor(arrivals, cost, settings.limits.max_batch)
    duration = max(arrivals[-1].at, INTERVAL) if arrivals else INTERVAL
    top = len(arrivals) / max(floor, 1e-9) if arrivals else HIGHEST
    hi = math.log(max(top, LOWEST))
    lo = hi - math.log(16)
    while not attempt([math.exp(lo)])[0] and lo > math.log(LOWEST) and len(arrivals) / duration > 0:
        hi, lo = lo, lo - math.log(16)
    for _ in range(ROUNDS):
        third = (hi - lo) / 3
        first, second = lo + third, lo + 2 * third
        ok_first, ok_second = attempt([math.exp(first), math.exp(second)])
        if ok_second:
            lo = second
        elif ok_first:
            lo, hi = first, second
        else:
            hi = first
    if best is None:  # not even the lowest rate met it: the most replicas tried
        out = evaluate([LOWEST])[0]
        best = (out, LOWEST)
    out, q = best
    return Bound(out, q, tuple(plan(arrivals, settings.cold_start, q)), tries)


def met(out: Outcome, settings: Settings) -> float:
    """The share of requests that had their first token within the objective."""
    if not out.requests:
        return 1.0
    objective = settings.ttft_objective
    ok = sum(1 for r in out.requests if r.first_token is not None and r.first_token - r.arrival <= objective)
    return ok / len(out.requests)


def fluid_floor(arrivals: Sequence[Arrival], cost: CostModel, max_batch: int) -> float:
    """GPU-seconds no schedule can beat: every prompt token at the lowest cost per token of any step size, each
    prompt's attention, and every other output token in a full batch of ``max_batch`` decodes (their attention left
    out): no cold start, no idle time, no latency objective."""
    sizes = [2**i for i in range(14)]
    per_prompt_token = min(cost.step_seconds(n, 0, 0) / n for n in sizes)
    per_decode = cost.step_seconds(max_batch, 0, 0) / max_batch
    seconds = 0.0
    for a in arrivals:
        seconds += a.prompt * per_prompt_token + cost.prefill_per_square * a.prompt * a.prompt * cost.attention_scale
        seconds += max(0, a.output - 1) * per_decode
    return seconds
