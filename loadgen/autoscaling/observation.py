"""What the HPA controller reads at a sync: the scale subresource, the pods its selector matches, the metrics APIs.

A metric that the API does not answer is absent from the mappings (the controller's FailedGet*Metric). Values are
in the metric's own unit; the controller converts them to milli-units (``Quantity.MilliValue``) as it reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Phase = Literal["Pending", "Running", "Failed", "Succeeded"]


@dataclass(frozen=True)
class Pod:
    name: str
    phase: Phase = "Running"
    ready: bool = True  # the PodReady condition
    deleting: bool = False  # deletionTimestamp set


@dataclass(frozen=True)
class Observation:
    """One sync's view. ``replicas`` is the scale's ``spec.replicas``, ``status_replicas`` its ``status.replicas``."""

    replicas: int
    pods: tuple[Pod, ...] = ()
    pod_metrics: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # metric → pod → value
    object_metrics: Mapping[str, float] = field(default_factory=dict)  # metric → the object's value
    external_metrics: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # metric → items
    status_replicas: int | None = None

    @property
    def current_status_replicas(self) -> int:
        return self.replicas if self.status_replicas is None else self.status_replicas


def simple_observation(
    replicas: int,
    values: Mapping[str, float],
    *,
    ready: int | None = None,
    pending: int = 0,
    pods_metrics: frozenset[str] = frozenset(),
) -> Observation:
    """A Deployment of ``replicas`` pods: ``pending`` of them Pending, ``ready`` Running and Ready (all the others
    by default), the rest Running but not Ready (a model still loading). Every metric in ``values`` is answered by
    the object and external APIs; those named in ``pods_metrics`` instead by every ready pod, each with that value.
    """
    ready_count = replicas - pending if ready is None else min(ready, replicas - pending)
    pods = tuple(
        Pod(f"pod-{i}", "Pending" if i < pending else "Running", pending <= i < pending + ready_count)
        for i in range(replicas)
    )
    reporting = [p.name for p in pods if p.ready]
    return Observation(
        replicas=replicas,
        pods=pods,
        pod_metrics={m: dict.fromkeys(reporting, v) for m, v in values.items() if m in pods_metrics},
        object_metrics={m: v for m, v in values.items() if m not in pods_metrics},
        external_metrics={m: (v,) for m, v in values.items() if m not in pods_metrics},
    )
