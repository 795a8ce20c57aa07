"""The HPA's replica calculator: one metric's proposal, as pkg/controller/podautoscaler/replica_calculator.go makes it.

Arithmetic is done the way the controller does it: every value is read as an integer number of milli-units
(``Quantity.MilliValue``, which rounds up), a Pods metric's average is an integer division, ratios are floats,
replica counts are ``ceil``. A proposal is ``None`` where the controller gets an error for the metric.

The rules per source, with the function of replica_calculator.go each follows:

- Pods (``GetMetricReplicas`` → ``calcPlainMetricReplicas``, on ``scale.spec.replicas``): pods being deleted or
  Failed are ignored; Pending pods are *unready*; pods without a value are *missing*; every other pod counts as
  ready (the PodReady condition is looked at for the CPU resource only, in ``groupPods``, so a Running pod that is
  not Ready but reports a value counts here). Without missing pods, and without unready ones on a way up, the
  proposal is ``ceil(ratio x ready)`` outside the tolerance. Otherwise missing pods are counted as the target on a
  way down and as 0 on a way up, unready pods as 0 on a way up, the ratio is taken again over all of them, and
  nothing changes if it falls within the tolerance, flips direction, or its ``ceil(ratio x counted)`` does.
- Object with Value, External with Value (``GetObjectMetricReplicas``, ``GetExternalMetricReplicas`` →
  ``getUsageRatioReplicaCount``, on ``spec.replicas``): ratio = value (the sum of the items for External) / target;
  within the tolerance nothing changes, else ``ceil(ratio x pods Running and Ready)``; at 0 replicas
  ``ceil(ratio)``, with no tolerance (HPAScaleToZero).
- Object and External with AverageValue (``GetObjectPerPodMetricReplicas``, ``GetExternalPerPodMetricReplicas``,
  on ``scale.status.replicas``): ratio = value / (target x replicas); outside the tolerance ``ceil(value /
  target)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loadgen.autoscaling.observation import Observation, Pod
from loadgen.autoscaling.spec import MetricSpec

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Tolerances:
    """The band ``[1 - down, 1 + up]`` of usage ratios in which the HPA does not scale."""

    down: float = 0.1
    up: float = 0.1

    def within(self, ratio: float) -> bool:
        return (1.0 - self.down) <= ratio <= (1.0 + self.up)


@dataclass(frozen=True)
class Proposal:
    """One metric's answer: ``replicas`` None is the controller's error for it, with ``why``."""

    metric: MetricSpec
    replicas: int | None
    usage: float | None  # what the HPA's status shows as the metric's current value (milli-units / 1000)
    why: str


def milli(value: float) -> int:
    """``Quantity.MilliValue``: the value in milli-units, rounded up (after rounding away float noise)."""
    return math.ceil(round(value * 1000, 6))


def _ceil_replicas(x: float) -> int:
    return INT32_MAX if x > INT32_MAX else math.ceil(x)


def _go_div(a: int, b: int) -> int:
    """Go's integer division: truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _ratio(values: Sequence[int], target: int) -> tuple[float, int]:
    average = _go_div(sum(values), len(values))
    return average / target, average


def pods_proposal(
    spec: MetricSpec, current: int, pods: Sequence[Pod], values: Mapping[str, float], tolerances: Tolerances
) -> Proposal:
    """``calcPlainMetricReplicas`` for a Pods metric (``values``: pod name → value, as the custom metrics API gave)."""
    if not pods:
        return Proposal(spec, None, None, "no pods returned by selector (FailedGetPodsMetric)")
    target = milli(spec.target)
    metrics = {name: milli(v) for name, v in values.items()}
    ready, unready, missing = 0, [], []
    for pod in pods:
        if pod.deleting or pod.phase == "Failed":
            metrics.pop(pod.name, None)
        elif pod.phase == "Pending":
            unready.append(pod.name)
            metrics.pop(pod.name, None)
        elif pod.name not in metrics:
            missing.append(pod.name)
        else:
            ready += 1
    if not metrics:
        return Proposal(spec, None, None, "no metrics for the targeted pods (FailedGetPodsMetric)")
    ratio, average = _ratio(list(metrics.values()), target)
    usage = average / 1000
    up_with_unready = bool(unready) and ratio > 1.0
    if not up_with_unready and not missing:
        if tolerances.within(ratio):
            return Proposal(spec, current, usage, f"ratio {ratio:.4g} within the tolerance")
        replicas = _ceil_replicas(ratio * ready)
        return Proposal(spec, replicas, usage, f"ceil({ratio:.4g} x {ready} pods) = {replicas}")
    if missing:
        if ratio < 1.0:
            metrics.update(dict.fromkeys(missing, target))
        elif ratio > 1.0:
            metrics.update(dict.fromkeys(missing, 0))
    if up_with_unready:
        metrics.update(dict.fromkeys(unready, 0))
    again, _ = _ratio(list(metrics.values()), target)
    counted = f"{len(missing)} missing, {len(unready)} unready: ratio {again:.4g} over {len(metrics)} pods"
    if tolerances.within(again) or (ratio < 1.0 < again) or (ratio > 1.0 > again):
        return Proposal(spec, current, usage, f"{counted}, within the tolerance or the other way")
    replicas = _ceil_replicas(again * len(metrics))
    if (again < 1.0 and replicas > current) or (again > 1.0 and replicas < current):
        return Proposal(spec, current, usage, f"{counted}, ceil = {replicas} the other way")
    return Proposal(spec, replicas, usage, f"{counted}, ceil = {replicas}")


def ready_pods(pods: Sequence[Pod]) -> int:
    """``getReadyPodsCount``: pods Running with the PodReady condition true."""
    return sum(1 for p in pods if p.phase == "Running" and p.ready)


def _value_proposal(spec: MetricSpec, current: int, usage: int, pods: Sequence[Pod], tol: Tolerances) -> Proposal:
    """``getUsageRatioReplicaCount``."""
    ratio = usage / milli(spec.target)
    if current == 0:
        replicas = _ceil_replicas(ratio)
        return Proposal(spec, replicas, usage / 1000, f"from zero: ceil({ratio:.4g}) = {replicas}")
    if tol.within(ratio):
        return Proposal(spec, current, usage / 1000, f"ratio {ratio:.4g} within the tolerance")
    if not pods:
        return Proposal(spec, None, usage / 1000, "no pods returned by selector")
    ready = ready_pods(pods)
    replicas = _ceil_replicas(ratio * ready)
    return Proposal(spec, replicas, usage / 1000, f"ceil({ratio:.4g} x {ready} ready) = {replicas}")


def _per_pod_proposal(spec: MetricSpec, status_replicas: int, usage: int, tol: Tolerances) -> Proposal:
    """``Get{Object,External}PerPodMetricReplicas``."""
    target = milli(spec.target)
    per_pod = target * status_replicas
    # Go's float division: x/0 is +Inf (never within), 0/0 is NaN (never within either)
    ratio = usage / per_pod if per_pod else (math.inf if usage else math.nan)
    # the status shows the value per replica, rounded up in milli-units (0 replicas: Go's overflow guard aside)
    shown = math.ceil(usage / status_replicas) / 1000 if status_replicas else usage / 1000
    if tol.within(ratio):
        return Proposal(spec, status_replicas, shown, f"ratio {ratio:.4g} within the tolerance")
    replicas = _ceil_replicas(usage / target)
    return Proposal(spec, replicas, shown, f"ceil({usage / 1000:g} / {spec.target:g}) = {replicas}")


def propose(spec: MetricSpec, observation: Observation, tolerances: Tolerances) -> Proposal:
    """One metric's proposal for this sync (``computeReplicasForMetric``)."""
    current = observation.replicas
    if spec.source == "Pods":
        values = observation.pod_metrics.get(spec.name)
        if values is None:
            return Proposal(spec, None, None, "the custom metrics API gave nothing (FailedGetPodsMetric)")
        return pods_proposal(spec, current, observation.pods, values, tolerances)
    if spec.source == "Object":
        if spec.name not in observation.object_metrics:
            return Proposal(spec, None, None, "the custom metrics API gave nothing (FailedGetObjectMetric)")
        usage = milli(observation.object_metrics[spec.name])
    else:
        items = observation.external_metrics.get(spec.name, ())
        if not items:
            return Proposal(spec, None, None, "no items from the external metrics API (FailedGetExternalMetric)")
        usage = sum(milli(v) for v in items)
    if spec.target_type == "Value":
        return _value_proposal(spec, current, usage, observation.pods, tolerances)
    return _per_pod_proposal(spec, observation.current_status_replicas, usage, tolerances)
