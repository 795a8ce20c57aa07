"""What a HorizontalPodAutoscaler (autoscaling/v2) says, with the defaults the API server and the controller fill in.

Defaults, as kubernetes/kubernetes writes them: pkg/apis/autoscaling/v2/defaults.go (``minReplicas`` 1; a
``behavior`` that is set has its missing rules filled: scale-up 0 s window, ``Max``, 4 pods or 100 % per 15 s;
scale-down ``Max``, 100 % per 15 s and no window of its own, which the controller then takes from its flag,
300 s). An HPA without ``behavior`` is not given one: the controller takes its older path for it (see
``behavior.py``). The controller's own settings (``ControllerConfig``) are kube-controller-manager's flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SourceType = Literal["Pods", "Object", "External"]
TargetType = Literal["Value", "AverageValue"]
PolicyType = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]


@dataclass(frozen=True)
class ControllerConfig:
    """kube-controller-manager's HPA flags: ``--horizontal-pod-autoscaler-*``."""

    sync_period: float = 15.0  # --horizontal-pod-autoscaler-sync-period
    tolerance: float = 0.1  # --horizontal-pod-autoscaler-tolerance
    downscale_stabilization: float = 300.0  # --horizontal-pod-autoscaler-downscale-stabilization
    # HPAConfigurableTolerance: alpha (off) in 1.33 and 1.34, beta (on) from 1.35; off, behavior tolerances are dropped
    configurable_tolerance: bool = True


@dataclass(frozen=True)
class MetricSpec:
    """One entry of ``spec.metrics``. ``target`` is the target's ``value`` or ``averageValue``, in the metric's unit."""

    name: str
    source: SourceType
    target: float
    target_type: TargetType = "AverageValue"

    def __post_init__(self) -> None:
        if self.source == "Pods" and self.target_type != "AverageValue":
            raise ValueError(f"metric {self.name}: a Pods metric takes an AverageValue target only")
        if self.target <= 0:
            raise ValueError(f"metric {self.name}: the target must be above 0")

    @property
    def describe(self) -> str:
        return f"{self.source.lower()} metric {self.name} ({self.target_type} {self.target:g})"


@dataclass(frozen=True)
class ScalingPolicy:
    type: PolicyType
    value: int
    period_seconds: int


@dataclass(frozen=True)
class ScalingRules:
    """``behavior.scaleUp`` or ``behavior.scaleDown``; ``None`` fields take the defaults."""

    stabilization_window_seconds: int | None = None
    select_policy: SelectPolicy | None = None
    policies: tuple[ScalingPolicy, ...] | None = None
    tolerance: float | None = None  # 1.33+, HPAConfigurableTolerance


DEFAULT_SCALE_UP = ScalingRules(
    stabilization_window_seconds=0,
    select_policy="Max",
    policies=(ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15)),
)
DEFAULT_SCALE_DOWN = ScalingRules(
    stabilization_window_seconds=None, select_policy="Max", policies=(ScalingPolicy("Percent", 100, 15),)
)


@dataclass(frozen=True)
class FilledRules:
    """Scaling rules after defaulting: every field set."""

    stabilization_window_seconds: float
    select_policy: SelectPolicy
    policies: tuple[ScalingPolicy, ...]
    tolerance: float | None


def fill_rules(rules: ScalingRules | None, default: ScalingRules, window_default: float) -> FilledRules:
    """The API server's GenerateHPAScale{Up,Down}Rules, then the controller's scale-down window from its flag."""
    given = rules or ScalingRules()
    window = given.stabilization_window_seconds
    if window is None:
        window = default.stabilization_window_seconds
    return FilledRules(
        stabilization_window_seconds=float(window) if window is not None else window_default,
        select_policy=given.select_policy or default.select_policy or "Max",
        policies=given.policies if given.policies is not None else default.policies or (),
        tolerance=given.tolerance,
    )


@dataclass(frozen=True)
class Behavior:
    scale_up: ScalingRules | None = None
    scale_down: ScalingRules | None = None


@dataclass(frozen=True)
class HpaSpec:
    """``spec`` of a HorizontalPodAutoscaler: its metrics, bounds and (optional) behavior."""

    metrics: tuple[MetricSpec, ...]
    max_replicas: int
    min_replicas: int = 1
    behavior: Behavior | None = None
    name: str = field(default="hpa", compare=False)

    def __post_init__(self) -> None:
        if not self.metrics:
            raise ValueError("an HPA needs at least one metric (the API server would default to CPU, not modelled)")
        if self.min_replicas < 0 or self.max_replicas < max(self.min_replicas, 1):
            raise ValueError("need 0 <= minReplicas <= maxReplicas and maxReplicas >= 1")
