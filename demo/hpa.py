"""The HorizontalPodAutoscaler's algorithm for one metric, a Pods metric with an AverageValue target or an External
metric with a Value or AverageValue target, as Kubernetes documents it ("Horizontal Pod Autoscaling", algorithm
details and configurable scaling behavior) and its controller does it:

1. ``propose`` (the replica calculator): the ratio of the average of the values returned to the target; within the
   tolerance (0.1) of 1 nothing changes, else ``ceil(ratio x pods with a value)``. Pods the selector matches that
   have no value are *missing*: the average is computed again with them at 0 on a scale-up and at the target on a
   scale-down, and when that ratio is within the tolerance or points the other way nothing changes. No pods, or no
   values at all, is an error (the HPA's FailedGetPodsMetric): no scaling, and no recommendation recorded.
   ``propose_external``: the external metric's items are summed; with a Value target the ratio of the sum to the
   target, within the tolerance nothing changes, else ``ceil(ratio x ready pods)``; with an AverageValue target the
   ratio of the sum to ``target x replicas``, outside the tolerance ``ceil(sum / target)``. At zero replicas
   (``minReplicas: 0``, HPAScaleToZero) both come to ``ceil(sum / target)``: any demand wakes the workload, none
   keeps it at zero.
2. ``Autoscaler.decide``: every recommendation is kept with its time; a scale-up goes no higher than the lowest
   recommendation of the scale-up stabilization window, a scale-down no lower than the highest of the scale-down
   window (defaults 0 s and 300 s); then minReplicas and maxReplicas bound it.

Not modelled: scaling policies (rate limits: the defaults, 4 pods or 100 % up and 100 % down per 15 s, allow every
step the demo takes), several metrics, and the readiness rules the HPA applies to CPU only.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

TOLERANCE = 0.1


@dataclass(frozen=True)
class HpaSpec:
    """What a HorizontalPodAutoscaler object says: the target and the bounds, and its behavior's windows."""

    target: float  # the metric's target averageValue
    min_replicas: int = 1
    max_replicas: int = 10
    tolerance: float = TOLERANCE
    scale_up_window: float = 0.0  # seconds; Kubernetes' default
    scale_down_window: float = 300.0  # seconds; Kubernetes' default


@dataclass(frozen=True)
class Proposal:
    """The replica calculator's answer, with what it was computed from."""

    replicas: int | None  # None: an error, no scaling
    average: float | None  # of the values returned (None when there were none)
    ratio: float | None  # average / target
    missing: tuple[str, ...]  # pods without a value
    why: str


def _ratio(values: Collection[float], target: float) -> tuple[float, float]:
    average = sum(values) / len(values)
    return average, average / target


def propose_external(current: int, ready: int, values: Collection[float], spec: HpaSpec, per_pod: bool) -> Proposal:
    """What the replica calculator recommends for an External metric whose items are ``values`` (summed), ``ready``
    of the ``current`` replicas ready; ``per_pod``: an AverageValue target, else a Value target."""
    if not values:
        return Proposal(None, None, None, (), "no value for the metric (FailedGetExternalMetric)")
    total = sum(values)
    if current == 0:  # scale from zero: the ratio to the target alone, whatever the target type
        replicas = math.ceil(total / spec.target)
        return Proposal(replicas, total, total / spec.target, (), f"from zero: ceil({total:g} / {spec.target:g})")
    if per_pod:
        ratio = total / (spec.target * current)
        if abs(ratio - 1.0) <= spec.tolerance:
            return Proposal(current, total, ratio, (), f"ratio {ratio:.2f} within the tolerance of 1")
        replicas = math.ceil(total / spec.target)
        return Proposal(replicas, total, ratio, (), f"ceil({total:g} / {spec.target:g}) = {replicas}")
    ratio = total / spec.target
    if abs(ratio - 1.0) <= spec.tolerance:
        return Proposal(current, total, ratio, (), f"ratio {ratio:.2f} within the tolerance of 1")
    replicas = math.ceil(ratio * ready)
    return Proposal(replicas, total, ratio, (), f"ceil({ratio:.2f} x {ready} ready) = {replicas}")


def propose(current: int, pods: Collection[str], values: Mapping[str, float], spec: HpaSpec) -> Proposal:
    """What the HPA's replica calculator recommends for ``pods`` (the selector's) given the metrics API's ``values``."""
    if not pods:
        return Proposal(None, None, None, (), "no pods match the selector")
    missing = tuple(sorted(p for p in pods if p not in values))
    if not values:
        return Proposal(None, None, None, missing, "no values for the pods (FailedGetPodsMetric)")
    with_values = len(pods) - len(missing)
    average, ratio = _ratio(list(values.values()), spec.target)
    if not missing:
        if abs(ratio - 1.0) <= spec.tolerance:
            return Proposal(current, average, ratio, (), f"ratio {ratio:.2f} within the tolerance of 1")
        replicas = math.ceil(ratio * with_values)
        return Proposal(replicas, average, ratio, (), f"ceil({ratio:.2f} x {with_values}) = {replicas}")
    # missing pods: as much as the target on a scale-down, nothing on a scale-up
    assumed = spec.target if ratio < 1.0 else 0.0
    filled = {**values, **dict.fromkeys(missing, assumed)}
    _, again = _ratio(list(filled.values()), spec.target)
    counted = f"{len(missing)} without a value counted as {assumed:g}: ratio {again:.2f}"
    if abs(again - 1.0) <= spec.tolerance:
        return Proposal(current, average, ratio, missing, f"{counted}, within the tolerance of 1")
    if (ratio < 1.0) != (again < 1.0):
        return Proposal(current, average, ratio, missing, f"{counted}, the other way")
    replicas = math.ceil(again * len(filled))
    if (again < 1.0 and replicas > current) or (again > 1.0 and replicas < current):
        return Proposal(current, average, ratio, missing, f"{counted}, ceil({again:.2f} x {len(filled)}) the other way")
    return Proposal(replicas, average, ratio, missing, f"{counted}, ceil({again:.2f} x {len(filled)}) = {replicas}")


@dataclass(frozen=True)
class Decision:
    """One sync: the proposal, then what stabilization and the bounds made of it."""

    at: float
    current: int
    proposal: Proposal
    replicas: int  # what the Deployment is scaled to (== current: no change)
    why: str  # how ``replicas`` follows from the proposal

    @property
    def scales(self) -> bool:
        return self.replicas != self.current


class Autoscaler:
    """The HPA controller's decisions for one target, over time (``at``: seconds on any steady clock)."""

    def __init__(self, spec: HpaSpec) -> None:
        self.spec = spec
        self._recommendations: list[tuple[float, int]] = []

    def decide(self, at: float, current: int, pods: Collection[str], values: Mapping[str, float]) -> Decision:
        """A sync on a Pods metric: the pods the selector matches and the values the API returned."""
        return self.settle(at, current, propose(current, pods, values, self.spec))

    def settle(self, at: float, current: int, proposal: Proposal) -> Decision:
        """What the controller makes of ``proposal``: stabilization, then minReplicas and maxReplicas."""
        spec = self.spec
        if current > spec.max_replicas or current < spec.min_replicas:
            bound = min(max(current, spec.min_replicas), spec.max_replicas)
            return Decision(at, current, proposal, bound, "outside minReplicas..maxReplicas")
        if proposal.replicas is None:
            return Decision(at, current, proposal, current, "no scaling")
        desired = proposal.replicas
        up_since, down_since = at - spec.scale_up_window, at - spec.scale_down_window
        recent_up = [r for t, r in self._recommendations if t > up_since]
        recent_down = [r for t, r in self._recommendations if t > down_since]
        lowest, highest = min([desired, *recent_up]), max([desired, *recent_down])
        self._recommendations = [(t, r) for t, r in self._recommendations if t > min(up_since, down_since)]
        self._recommendations.append((at, desired))
        stabilized = min(max(current, lowest), highest)
        why = ""
        if stabilized != desired:
            if desired > current:
                why = f"held to {stabilized}: lowest recommendation of the last {spec.scale_up_window:g} s"
            else:
                why = f"held to {stabilized}: highest recommendation of the last {spec.scale_down_window:g} s"
        replicas = min(max(stabilized, spec.min_replicas), spec.max_replicas)
        if replicas != stabilized:
            limit = "maxReplicas" if replicas == spec.max_replicas else "minReplicas"
            why = f"{why}; " if why else ""
            why += f"bounded by {limit} {replicas}"
        return Decision(at, current, proposal, replicas, why)
