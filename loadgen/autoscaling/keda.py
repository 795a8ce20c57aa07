"""KEDA's loop for a ScaledObject, on top of the HPA it creates (kedacore/keda, pkg/scaling and controllers/keda).

Every ``pollingInterval`` (30 s) KEDA asks each trigger for its value and whether it is active (the Prometheus
scaler: value > ``activationThreshold``, default 0; the ScaledObject is active when any trigger is:
``getScaledObjectState`` in pkg/scaling/scale_handler.go), then ``RequestScale``
(pkg/scaling/executor/scale_scaledobjects.go):

- active, at 0 replicas (or below ``minReplicaCount`` with an ``idleReplicaCount``): scale to ``minReplicaCount``
  if above 0, else 1 (``scaleFromZeroOrIdle``); active otherwise: only remember the time (``lastActiveTime``);
- inactive, above ``idleReplicaCount`` (when set) or above 0 with ``minReplicaCount`` 0: once ``lastActiveTime +
  cooldownPeriod`` (300 s) is past, strictly, scale to ``idleReplicaCount`` or ``minReplicaCount``
  (``scaleToZeroOrIdle``; before the first activity ``initialCooldownPeriod``, default 0, counts from creation);
- inactive, no ``idleReplicaCount``, below ``minReplicaCount``: scale to ``minReplicaCount``.

Between 1 and ``maxReplicaCount`` the HPA KEDA created does the scaling: one External metric per trigger,
``AverageValue`` unless the trigger says ``Value`` (controllers/keda/hpa.go), ``minReplicas`` = ``minReplicaCount``
if above 0 else 1 (``GetHPAMinReplicas``), ``maxReplicas`` = ``maxReplicaCount`` (default 100), and the
ScaledObject's ``advanced.horizontalPodAutoscalerConfig.behavior``. At 0 replicas that HPA is disabled
(``minReplicas`` 1, see controller.py), so only KEDA leaves 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from loadgen.autoscaling.spec import Behavior, HpaSpec, MetricSpec, TargetType


@dataclass(frozen=True)
class Trigger:
    """One trigger: its metric, the target the HPA gets, and KEDA's activation threshold for it."""

    metric: str
    target: float
    metric_type: TargetType = "AverageValue"
    activation_threshold: float = 0.0


@dataclass(frozen=True)
class ScaledObject:
    triggers: tuple[Trigger, ...]
    min_replica_count: int = 0
    max_replica_count: int = 100
    polling_interval: float = 30.0
    cooldown_period: float = 300.0
    initial_cooldown_period: float = 0.0
    idle_replica_count: int | None = None
    behavior: Behavior | None = None

    def hpa_spec(self) -> HpaSpec:
        """The HorizontalPodAutoscaler KEDA creates for this ScaledObject."""
        return HpaSpec(
            metrics=tuple(MetricSpec(t.metric, "External", t.target, t.metric_type) for t in self.triggers),
            min_replicas=self.min_replica_count if self.min_replica_count > 0 else 1,
            max_replicas=self.max_replica_count,
            behavior=self.behavior,
            name="keda-hpa",
        )

    def active(self, values: Mapping[str, float]) -> bool:
        """Any trigger whose value is above its activation threshold (a trigger without a value is not active)."""
        return any(t.metric in values and values[t.metric] > t.activation_threshold for t in self.triggers)


@dataclass(frozen=True)
class KedaAction:
    at: float
    current: int
    active: bool
    replicas: int  # what the scale subresource holds after the poll
    reason: str

    @property
    def scaled(self) -> bool:
        return self.replicas != self.current


class KedaLoop:
    """KEDA's executor for one ScaledObject: ``poll`` is one pass of its loop."""

    def __init__(self, scaled_object: ScaledObject, created_at: float = 0.0) -> None:
        self.scaled_object = scaled_object
        self.created_at = created_at
        self.last_active: float | None = None

    def poll(self, now: float, current: int, values: Mapping[str, float], active: bool | None = None) -> KedaAction:
        """``active``: the scaler's own answer where it gives one (the external scaler's ``IsActive``, which KEDA
        asks after ``GetMetrics``: ``GetMetricsAndActivity`` in pkg/scalers/external_scaler.go); by default each
        trigger's value against its activation threshold."""
        so = self.scaled_object
        active = so.active(values) if active is None else active
        minimum, idle = so.min_replica_count, so.idle_replica_count
        if active:
            if (idle is not None and current < minimum) or current == 0:
                self.last_active = now
                replicas = minimum if minimum > 0 else 1
                return KedaAction(now, current, True, replicas, "activated: scaled from zero or idle")
            self.last_active = now
            return KedaAction(now, current, True, current, "active: the HPA scales")
        if (idle is not None and current > idle) or (current > 0 and minimum == 0):
            if self.last_active is None:
                due = self.created_at + so.initial_cooldown_period < now
            else:
                due = self.last_active + so.cooldown_period < now
            if not due:
                return KedaAction(now, current, False, current, "inactive: cooling down")
            replicas = idle if idle is not None else minimum
            return KedaAction(now, current, False, replicas, "deactivated after the cooldown period")
        if idle is None and current < minimum:
            return KedaAction(now, current, False, minimum, "below minReplicaCount")
        return KedaAction(now, current, False, current, "inactive: no change")
