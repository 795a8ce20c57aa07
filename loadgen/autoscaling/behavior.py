"""What the HPA controller does with the proposal: stabilization windows, then rate limits and the bounds.

Two paths, as pkg/controller/podautoscaler/horizontal.go has them:

- ``spec.behavior`` unset (``normalizeDesiredReplicas``): the highest recommendation of the controller's
  downscale window (300 s) holds a scale-down (``stabilizeRecommendation``); a scale-up may at most reach
  ``max(2 x current, 4)`` in one sync (``convertDesiredReplicasWithRules``); then min/max replicas.
- ``spec.behavior`` set (``normalizeDesiredReplicasWithBehaviors``): the recommendation is held between the lowest
  of the scale-up window and the highest of the scale-down window (``stabilizeRecommendationWithBehaviors``); then
  the policies limit the change against the replicas at the start of each policy's period, counted back from the
  scale events the controller stored (``calculateScale{Up,Down}Limit...``, ``getReplicasChangePerPeriod``); the
  policies' limits combine by ``selectPolicy`` (Max: the largest change, Min: the smallest, Disabled: none); then
  min/max replicas (``convertDesiredReplicasWithBehaviorRate``).

Time comparisons keep Go's strictness: a recommendation or event exactly a window or period old no longer counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from loadgen.autoscaling.spec import FilledRules, ScalingPolicy

INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)


@dataclass
class Recommendation:
    replicas: int
    at: float


@dataclass
class ScaleEvent:
    change: int  # replicas added (scale-up list) or removed (scale-down list), never negative
    at: float
    outdated: bool = False


def stabilize_legacy(recs: list[Recommendation], now: float, window: float, desired: int) -> int:
    """``stabilizeRecommendation``: the highest recommendation not older than ``window``, recording ``desired``."""
    cutoff = now - window
    highest, old = desired, None
    for i, rec in enumerate(recs):
        if rec.at < cutoff:
            old = i
        elif rec.replicas > highest:
            highest = rec.replicas
    _record(recs, old, Recommendation(desired, now))
    return highest


def stabilize(
    recs: list[Recommendation], now: float, up_window: float, down_window: float, current: int, desired: int
) -> int:
    """``stabilizeRecommendationWithBehaviors``: ``current`` brought within [lowest of the up window, highest of
    the down window], each including ``desired``; ``desired`` is recorded, over one sample older than both."""
    up_cutoff, down_cutoff = now - up_window, now - down_window
    lowest = highest = desired
    old = None
    for i, rec in enumerate(recs):
        if rec.at > up_cutoff:
            lowest = min(lowest, rec.replicas)
        if rec.at > down_cutoff:
            highest = max(highest, rec.replicas)
        if rec.at < up_cutoff and rec.at < down_cutoff:
            old = i
    _record(recs, old, Recommendation(desired, now))
    return min(max(current, lowest), highest)


def _record(recs: list[Recommendation], old: int | None, new: Recommendation) -> None:
    if old is None:
        recs.append(new)
    else:
        recs[old] = new


def convert_legacy(current: int, desired: int, min_replicas: int, max_replicas: int) -> tuple[int, str]:
    """``convertDesiredReplicasWithRules``: at most ``max(2 x current, 4)`` in one step, within min/max."""
    up_limit = max(2 * current, 4)
    if max_replicas > up_limit:
        ceiling, reason = up_limit, "ScaleUpLimit"
    else:
        ceiling, reason = max_replicas, "TooManyReplicas"
    if desired < min_replicas:
        return min_replicas, "TooFewReplicas"
    if desired > ceiling:
        return ceiling, reason
    return desired, "DesiredWithinRange"


def replicas_changed(period: float, events: list[ScaleEvent], now: float) -> int:
    """``getReplicasChangePerPeriod``: the changes of the events less than ``period`` old."""
    cutoff = now - period
    return sum(e.change for e in events if e.at > cutoff)


def _period_starts(
    current: int, up: list[ScaleEvent], down: list[ScaleEvent], rules: FilledRules, now: float
) -> Iterator[tuple[ScalingPolicy, int]]:
    """Each policy with the replicas at the start of its period: the current ones less what it added since,
    plus what it removed since."""
    for policy in rules.policies:
        added = replicas_changed(policy.period_seconds, up, now)
        removed = replicas_changed(policy.period_seconds, down, now)
        yield policy, current - added + removed


def scale_up_limit(current: int, up: list[ScaleEvent], down: list[ScaleEvent], rules: FilledRules, now: float) -> int:
    """``calculateScaleUpLimitWithScalingRules``: the most replicas the policies allow now."""
    if rules.select_policy == "Disabled":
        return current
    proposals = [
        start + policy.value
        if policy.type == "Pods"
        # rounded up, or a small percentage of few replicas would never add one
        else math.ceil(start * (1 + policy.value / 100))
        for policy, start in _period_starts(current, up, down, rules, now)
    ]
    if rules.select_policy == "Min":
        return min(proposals, default=INT32_MAX)
    return max(proposals, default=INT32_MIN)


def scale_down_limit(current: int, up: list[ScaleEvent], down: list[ScaleEvent], rules: FilledRules, now: float) -> int:
    """``calculateScaleDownLimitWithBehaviors``: the fewest replicas the policies allow now."""
    if rules.select_policy == "Disabled":
        return current
    proposals = [
        start - policy.value
        if policy.type == "Pods"
        # Go's conversion to int32 truncates toward zero
        else math.trunc(start * (1 - policy.value / 100))
        for policy, start in _period_starts(current, up, down, rules, now)
    ]
    if rules.select_policy == "Min":
        return max(proposals, default=INT32_MIN)
    return min(proposals, default=INT32_MAX)


@dataclass(frozen=True)
class Bounds:
    min_replicas: int
    max_replicas: int


def convert_with_behavior(
    current: int,
    desired: int,
    bounds: Bounds,
    up: FilledRules,
    down: FilledRules,
    events: tuple[list[ScaleEvent], list[ScaleEvent]],
    now: float,
) -> tuple[int, str]:
    """``convertDesiredReplicasWithBehaviorRate``: ``events`` are the (scale-up, scale-down) events stored."""
    up_events, down_events = events
    if desired > current:
        limit = max(scale_up_limit(current, up_events, down_events, up, now), current)
        if bounds.max_replicas > limit:
            ceiling, reason = limit, "ScaleUpLimit"
        else:
            ceiling, reason = bounds.max_replicas, "TooManyReplicas"
        if desired > ceiling:
            return ceiling, reason
    elif desired < current:
        limit = min(scale_down_limit(current, up_events, down_events, down, now), current)
        if bounds.min_replicas < limit:
            floor, reason = limit, "ScaleDownLimit"
        else:
            floor, reason = bounds.min_replicas, "TooFewReplicas"
        if desired < floor:
            return floor, reason
    return desired, "DesiredWithinRange"


def store_event(events: list[ScaleEvent], rules: FilledRules, change: int, now: float) -> None:
    """``storeScaleEvent``: events older than the longest policy period are marked outdated and the last of them
    is overwritten by the new one; otherwise it is appended."""
    longest = max((p.period_seconds for p in rules.policies), default=0)
    cutoff = now - longest
    old = None
    for i, event in enumerate(events):
        if event.at < cutoff:
            event.outdated = True
        if event.outdated:
            old = i
    new = ScaleEvent(change, now)
    if old is None:
        events.append(new)
    else:
        events[old] = new
