"""The HPA controller's sync for one HorizontalPodAutoscaler (``reconcileAutoscaler`` in horizontal.go), stepped.

``HpaController.sync(now, observation)`` is one pass of the controller's loop: it reads the observation the way
the controller reads the scale subresource, the pod lister and the metrics APIs, and returns the replicas it would
write to the scale subresource with the rule that decided them. It keeps the controller's per-HPA state: the
recommendations of the stabilization windows and the scale events the policies count.

Order of one sync, as the source has it: the first sync records the current replicas as a recommendation; at 0
replicas with ``minReplicas`` above 0 scaling is disabled (``ScalingDisabled``); replicas above ``maxReplicas`` or
below ``minReplicas`` are set to the bound without looking at metrics; otherwise every metric proposes, the
highest valid proposal wins, and an invalid metric stops the sync if all are invalid or the rest would scale down
(``computeReplicasForMetrics``); then the behavior path (``behavior.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.autoscaling.behavior import (
    Bounds,
    Recommendation,
    ScaleEvent,
    convert_legacy,
    convert_with_behavior,
    stabilize,
    stabilize_legacy,
    store_event,
)
from loadgen.autoscaling.observation import Observation
from loadgen.autoscaling.replica_calculator import Proposal, Tolerances, propose
from loadgen.autoscaling.spec import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    ControllerConfig,
    FilledRules,
    HpaSpec,
    fill_rules,
)


@dataclass(frozen=True)
class Decision:
    """One sync's outcome. ``replicas`` is what the scale subresource holds after it (``current`` if unchanged)."""

    at: float
    current: int
    replicas: int
    proposals: tuple[Proposal, ...]  # one per metric, in spec order
    metric: str | None  # the metric whose proposal won (None: no metric was computed)
    recommendation: int | None  # the winning proposal, before stabilization and limits
    stabilized: int | None
    limit: str  # the condition reason that decided ``replicas``
    reason: str

    @property
    def scaled(self) -> bool:
        return self.replicas != self.current


class HpaController:
    """The controller's decisions for one HPA over time (``now``: seconds on any steady clock)."""

    def __init__(self, spec: HpaSpec, config: ControllerConfig | None = None) -> None:
        self.spec = spec
        self.config = config or ControllerConfig()
        self._recommendations: list[Recommendation] = []
        self._up_events: list[ScaleEvent] = []
        self._down_events: list[ScaleEvent] = []
        behavior = spec.behavior
        window = self.config.downscale_stabilization
        self._up: FilledRules | None = None
        self._down: FilledRules | None = None
        if behavior is not None:
            self._up = fill_rules(behavior.scale_up, DEFAULT_SCALE_UP, window)
            self._down = fill_rules(behavior.scale_down, DEFAULT_SCALE_DOWN, window)

    @property
    def tolerances(self) -> Tolerances:
        """The controller's tolerance, overridden per direction by the behavior's (1.33+, HPAConfigurableTolerance)."""
        down = up = self.config.tolerance
        if self.config.configurable_tolerance and self._up is not None and self._down is not None:
            down = self._down.tolerance if self._down.tolerance is not None else down
            up = self._up.tolerance if self._up.tolerance is not None else up
        return Tolerances(down, up)

    def sync(self, now: float, observation: Observation) -> Decision:
        spec, current = self.spec, observation.replicas
        if not self._recommendations:
            self._recommendations.append(Recommendation(current, now))
        if current == 0 and spec.min_replicas != 0:
            return Decision(now, 0, 0, (), None, None, None, "ScalingDisabled", "the target has 0 replicas")
        if current > spec.max_replicas:
            return self._rescale(now, current, spec.max_replicas, "TooManyReplicas", "above maxReplicas")
        if current < spec.min_replicas:
            return self._rescale(now, current, spec.min_replicas, "TooFewReplicas", "below minReplicas")
        tolerances = self.tolerances
        proposals = tuple(propose(m, observation, tolerances) for m in spec.metrics)
        valid = [p for p in proposals if p.replicas is not None]
        best: Proposal | None = None
        for p in valid:
            assert p.replicas is not None
            if best is None or best.replicas == 0 or p.replicas > (best.replicas or 0):
                best = p
        invalid = len(proposals) - len(valid)
        if best is None or best.replicas is None or (invalid and best.replicas < current):
            first = next(p for p in proposals if p.replicas is None)
            why = f"{invalid} of {len(proposals)} metrics invalid, first: {first.metric.name}: {first.why}"
            return Decision(now, current, current, proposals, None, None, None, "FailedGetMetrics", why)
        recommended = best.replicas
        if self._up is None or self._down is None:
            window = self.config.downscale_stabilization
            stabilized = stabilize_legacy(self._recommendations, now, window, recommended)
            replicas, limit = convert_legacy(current, stabilized, spec.min_replicas, spec.max_replicas)
        else:
            stabilized = stabilize(
                self._recommendations,
                now,
                self._up.stabilization_window_seconds,
                self._down.stabilization_window_seconds,
                current,
                recommended,
            )
            bounds = Bounds(spec.min_replicas, spec.max_replicas)
            events = (self._up_events, self._down_events)
            replicas, limit = convert_with_behavior(current, stabilized, bounds, self._up, self._down, events, now)
        if limit == "DesiredWithinRange" and stabilized != recommended:
            # the condition reasons the controller sets; its path without a behavior knows scale-down windows only
            up = recommended >= current and self._up is not None
            limit = "ScaleUpStabilized" if up else "ScaleDownStabilized"
        reason = f"{best.metric.describe}: {best.why}"
        if replicas != current:
            self._store(now, current, replicas)
        return Decision(now, current, replicas, proposals, best.metric.name, recommended, stabilized, limit, reason)

    def _rescale(self, now: float, current: int, replicas: int, limit: str, reason: str) -> Decision:
        self._store(now, current, replicas)
        return Decision(now, current, replicas, (), None, None, None, limit, reason)

    def _store(self, now: float, current: int, replicas: int) -> None:
        if self._up is None or self._down is None:
            return  # without a behavior the controller keeps no events
        if replicas > current:
            store_event(self._up_events, self._up, replicas - current, now)
        else:
            store_event(self._down_events, self._down, current - replicas, now)
