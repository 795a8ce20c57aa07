"""A metric series in, the replica series out: the HPA (or KEDA and its HPA) replayed over recorded values.

``replica_series`` runs the controller every sync period (15 s) from the first sample's time to the last; at each
sync the latest sample at or before it is what the metrics APIs answer. Scaling takes effect at once: the next
sync sees the new ``spec.replicas``, every pod Running and Ready unless the sample says how many are ready or
Pending. Hold the result against a real HPA by recording the metric it reads
(``kubectl get --raw`` on the metrics API, or the adapter's series) and ``kubectl get hpa -w``'s replicas at the
same times; docs/autoscaling-model.md says how.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from loadgen.autoscaling.controller import Decision, HpaController
from loadgen.autoscaling.keda import KedaAction, KedaLoop, ScaledObject
from loadgen.autoscaling.observation import Observation, simple_observation
from loadgen.autoscaling.spec import ControllerConfig, HpaSpec


@dataclass(frozen=True)
class Sample:
    """The metrics at ``at`` (seconds). Pods metrics' values are what each reporting pod exports; ``ready`` pods
    report (all but ``pending`` when None), ``pending`` pods are Pending, the rest Running but not Ready."""

    at: float
    values: Mapping[str, float] = field(default_factory=dict)
    ready: int | None = None
    pending: int = 0


Observe = Callable[[float, int], Observation]  # (sync time, spec.replicas) → what the controller reads


def _observer(samples: Iterable[Sample], pods_metrics: frozenset[str]) -> tuple[Observe, float, float]:
    ordered = sorted(samples, key=lambda s: s.at)
    if not ordered:
        raise ValueError("no samples")
    times = [s.at for s in ordered]

    def observe(now: float, replicas: int) -> Observation:
        latest = ordered[max(bisect.bisect_right(times, now) - 1, 0)]
        pending = min(latest.pending, replicas)
        return simple_observation(
            replicas, latest.values, ready=latest.ready, pending=pending, pods_metrics=pods_metrics
        )

    return observe, ordered[0].at, ordered[-1].at


def _ticks(start: float, end: float, period: float) -> list[float]:
    count = int((end - start) // period)
    return [start + i * period for i in range(count + 1)]


def replica_series(
    spec: HpaSpec,
    samples: Iterable[Sample] | Observe,
    *,
    replicas: int,
    start: float = 0.0,
    end: float | None = None,
    config: ControllerConfig | None = None,
) -> list[tuple[float, int]]:
    """The HPA's replicas after each sync: ``[(time, replicas), ...]``, starting from ``replicas``.

    ``samples`` is either a metric series (``Sample`` per time; the Pods metrics of ``spec`` are read as each
    ready pod's value, the others as the object's or the external metric's value) or a callable giving the full
    ``Observation`` for a sync time and the replicas then (``start`` and ``end`` are needed with a callable).
    """
    return [
        (d.at, d.replicas) for d in hpa_decisions(spec, samples, replicas=replicas, start=start, end=end, config=config)
    ]


def hpa_decisions(
    spec: HpaSpec,
    samples: Iterable[Sample] | Observe,
    *,
    replicas: int,
    start: float = 0.0,
    end: float | None = None,
    config: ControllerConfig | None = None,
) -> list[Decision]:
    """``replica_series`` with every sync's ``Decision`` (the metric and the rule that decided)."""
    config = config or ControllerConfig()
    observe, first, last = _source(spec, samples, start, end)
    controller = HpaController(spec, config)
    decisions = []
    for now in _ticks(first, last, config.sync_period):
        decision = controller.sync(now, observe(now, replicas))
        replicas = decision.replicas
        decisions.append(decision)
    return decisions


def _source(
    spec: HpaSpec, samples: Iterable[Sample] | Observe, start: float, end: float | None
) -> tuple[Observe, float, float]:
    if callable(samples):
        if end is None:
            raise ValueError("a callable source needs an end time")
        return samples, start, end
    pods_metrics = frozenset(m.name for m in spec.metrics if m.source == "Pods")
    observe, first, last = _observer(samples, pods_metrics)
    return observe, first, last if end is None else end


def keda_replica_series(
    scaled_object: ScaledObject,
    samples: Iterable[Sample],
    *,
    replicas: int = 0,
    config: ControllerConfig | None = None,
) -> list[tuple[float, int, str]]:
    """KEDA's polls and its HPA's syncs over a metric series: ``[(time, replicas, who)]`` after every poll and
    sync, ``who`` being ``"keda"`` or ``"hpa"``. Both start at the first sample; at a time both are due KEDA
    polls first (the two loops are independent in a cluster, so either order can happen there)."""
    config = config or ControllerConfig()
    spec = scaled_object.hpa_spec()
    observe, first, last = _observer(samples, frozenset())
    keda, hpa = KedaLoop(scaled_object, created_at=first), HpaController(spec, config)
    polls = set(_ticks(first, last, scaled_object.polling_interval))
    syncs = set(_ticks(first, last, config.sync_period))
    out: list[tuple[float, int, str]] = []
    for now in sorted(polls | syncs):
        if now in polls:
            observation = observe(now, replicas)
            action: KedaAction = keda.poll(now, replicas, {m: v[0] for m, v in observation.external_metrics.items()})
            replicas = action.replicas
            out.append((now, replicas, "keda"))
        if now in syncs:
            replicas = hpa.sync(now, observe(now, replicas)).replicas
            out.append((now, replicas, "hpa"))
    return out
