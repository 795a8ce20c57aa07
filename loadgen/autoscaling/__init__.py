"""The HorizontalPodAutoscaler controller (Kubernetes 1.28-1.37) and KEDA's loop on top of it, as pure functions.

- ``replica_series(spec, samples, replicas=...)``: a metric series in, the HPA's replica series out;
  ``keda_replica_series`` the same for a ScaledObject.
- ``HpaController(spec).sync(now, observation) -> Decision`` and ``KedaLoop(scaled_object).poll(...)``: the
  stepping API a discrete-event simulation calls.

docs/autoscaling-model.md lists each rule with the source it follows and what is not modelled.
"""

from loadgen.autoscaling.controller import Decision, HpaController
from loadgen.autoscaling.keda import KedaAction, KedaLoop, ScaledObject, Trigger
from loadgen.autoscaling.observation import Observation, Pod, simple_observation
from loadgen.autoscaling.replica_calculator import Proposal, Tolerances
from loadgen.autoscaling.series import Sample, hpa_decisions, keda_replica_series, replica_series
from loadgen.autoscaling.spec import (
    Behavior,
    ControllerConfig,
    HpaSpec,
    MetricSpec,
    ScalingPolicy,
    ScalingRules,
)

__all__ = [
    "Behavior",
    "ControllerConfig",
    "Decision",
    "HpaController",
    "HpaSpec",
    "KedaAction",
    "KedaLoop",
    "MetricSpec",
    "Observation",
    "Pod",
    "Proposal",
    "Sample",
    "ScaledObject",
    "ScalingPolicy",
    "ScalingRules",
    "Tolerances",
    "Trigger",
    "hpa_decisions",
    "keda_replica_series",
    "replica_series",
    "simple_observation",
]
