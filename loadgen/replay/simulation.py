"""One policy over one trace, in virtual time: the gateway, the replicas' lifecycle, the scrapes and the autoscaler.

Events, in time order (ties: ready pods, then deadlines, scrapes, KEDA's poll, the HPA's sync, then arrivals):

- an arrival goes to the ready replica holding the fewest requests (the gateway's least-loaded pick; ties to the
  oldest), or waits at the gateway while none is ready; a replica that becomes ready takes the gateway's requests;
- a scrape (every ``scrape_interval``) reads every pod as Prometheus would: a ready or draining engine's vLLM series,
  the GPU series of every pod that holds a GPU (a loading pod's GPU does no steps: 0 %), the gateway's queue and its
  request counter; the metric pipeline turns them into what the adapter serves;
- the HPA's sync (every ``sync_period``) and KEDA's poll (every ``pollingInterval``) read the metrics the policy names
  and set the Deployment's replicas; the Deployment creates pods at once (loading for ``cold_start``, costing their
  GPU) or deletes them as a ReplicaSet picks (pods not ready first, newest first; then the most recently ready);
- a deleted pod leaves the gateway's endpoints, finishes what it holds and goes, or at ``grace`` is gone with what it
  still held cut.

Every policy starts with the replicas it would hold at the trace's start, ready (``initial_replicas``). GPU-seconds
count every pod from its creation (or the trace's start) to its end (or the last arrival): loading and draining
included. After the last arrival the replay goes on until every request has finished or been cut, or ``tail``
seconds have passed; the requests it then still holds count as served late or not at all (no first token: outside
the objective).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..autoscaling import ControllerConfig, HpaController, HpaSpec, KedaLoop, Observation, Pod, ScaledObject
from ..serving.scheduler import Limits
from .cost_model import CostModel
from .pipeline import EngineSample, GatewaySample, GpuSample, Scrape
from .policies import PODS_METRICS
from .replica import Phase, ReplayRequest, Replica
from .trace import Arrival


@dataclass(frozen=True)
class Settings:
    cold_start: float = 60.0  # seconds from a pod's creation to its engine serving
    grace: float = 30.0  # terminationGracePeriodSeconds: a deleted pod's time to drain
    scrape_interval: float = 15.0
    ttft_objective: float = 2.0  # seconds
    limits: Limits = field(default_factory=Limits)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    tail: float = 900.0  # the longest the replay follows requests after the last arrival
    flow_control: bool = False  # the gateway holds requests while every ready engine is saturated


class Policy(Protocol):
    """How the Deployment is scaled: an HPA, a ScaledObject (KEDA and the HPA it makes), or neither (a fixed count:
    the replicas it starts with). ``policies.Policy`` is one."""

    @property
    def name(self) -> str: ...

    @property
    def hpa(self) -> HpaSpec | None: ...

    @property
    def keda(self) -> ScaledObject | None: ...


class Metrics(Protocol):
    """The metric pipeline (``served.ServedMetrics``): scrapes in, what the adapter serves out."""

    def scrape(self, scrape: Scrape) -> None: ...

    def pods_metric(self, name: str, t: float) -> Mapping[str, float]: ...

    def external_metric(self, name: str, t: float) -> float | None: ...


@dataclass
class Timeline:
    """Per scrape: the time, the Deployment's replicas, those ready, requests arrived since the last point."""

    t: list[float] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)


@dataclass
class Outcome:
    policy: str
    requests: list[ReplayRequest]
    replicas: list[Replica]
    trace_end: float
    scale_events: int
    peak_replicas: int
    timeline: Timeline

    @property
    def gpu_seconds(self) -> float:
        end = self.trace_end
        return sum(
            max(0.0, min(end, r.gone if r.gone is not None else end) - max(0.0, r.created)) for r in self.replicas
        )


NAMESPACE = "replay"  # the Deployment's, its pods' and the gateway's
# event kinds, in the order they are taken at the same time
READY, DEADLINE, SET, DISPATCH, SCRAPE, POLL, SYNC = range(7)
# llm-d's endpoint picker calls an engine saturated at 5 requests waiting or 80 % of its KV cache
SATURATED_WAITING, SATURATED_KV = 5, 0.8
DISPATCH_TICK = 0.05  # seconds: how often a gateway holding requests for saturation looks for room


class Simulation:
    def __init__(
        self,
        arrivals: Sequence[Arrival],
        policy: Policy,
        settings: Settings,
        cost: CostModel,
        metrics: Metrics,
        initial_replicas: int,
        progress: Callable[[float], None] | None = None,
        schedule: Sequence[tuple[float, int]] = (),
    ) -> None:
        """``schedule``: (time, replicas) at which the Deployment is set to that many replicas, as the clairvoyant
        bound sets it (bound.py), besides or instead of the policy's autoscaler."""
        self.arrivals = arrivals
        self.policy = policy
        self.settings = settings
        self.cost = cost
        self.metrics = metrics
        self.progress = progress
        self.trace_end = arrivals[-1].at if arrivals else 0.0
        self.replicas: list[Replica] = []  # every pod ever made, by index
        self._live: list[Replica] = []  # those not known to be gone (pruned at each scrape)
        self._ready: list[Replica] = []  # the gateway's endpoints, oldest first
        self.requests: list[ReplayRequest] = []
        self.held: deque[ReplayRequest] = deque()  # at the gateway, in arrival order
        self.gateway_requests = 0
        self.timeline = Timeline()
        self.scale_events = 0
        self.peak = 0
        self._events: list[tuple[float, int, int, int]] = []  # (time, kind, order, replica index or 0)
        self._order = 0
        self._schedule = schedule
        self._hpa: HpaController | None = None
        self._keda: KedaLoop | None = None
        if policy.hpa is not None:
            self._hpa = HpaController(policy.hpa, settings.controller)
        elif policy.keda is not None:
            self._keda = KedaLoop(policy.keda)
            if initial_replicas:
                # the workload served until the trace began: KEDA's cooldown counts from there, not from a
                # ScaledObject made at the start whose first poll, with no metric history yet, would take it to zero
                self._keda.last_active = 0.0
            self._hpa = HpaController(policy.keda.hpa_spec(), settings.controller)
        for _ in range(initial_replicas):
            replica = self._create(-settings.cold_start)
            replica.became_ready()
            self._ready.append(replica)
        self.peak = initial_replicas

    @property
    def desired(self) -> int:
        """The Deployment's replicas: its pods not deleted."""
        return sum(1 for r in self._live if r.deleted is None)

    def run(self) -> Outcome:
        s = self.settings
        self._push(s.scrape_interval, SCRAPE)
        if self._hpa is not None:
            self._push(s.controller.sync_period, SYNC)
        if self._keda is not None:
            self._push(self._keda.scaled_object.polling_interval, POLL)
        for k, (at, _) in enumerate(self._schedule):
            self._push(at, SET, k)
        stop = self.trace_end + s.tail
        i, n = 0, len(self.arrivals)
        last_report = 0.0
        while True:
            next_event = self._events[0][0] if self._events else math.inf
            next_arrival = self.arrivals[i].at if i < n else math.inf
            if next_arrival < next_event:
                self._arrive(i, next_arrival)
                i += 1
                t = next_arrival
            else:
                t, kind, _, index = heapq.heappop(self._events)
                if t > stop or (t > self.trace_end and i >= n and self._all_done()):
                    break
                self._handle(kind, index, t)
            if self.progress is not None and t - last_report >= 60:
                last_report = t
                self.progress(t)
        for replica in self._live:
            replica.advance_to(min(t, stop))
        return Outcome(self.policy.name, self.requests, self.replicas, self.trace_end, self.scale_events, self.peak,
                       self.timeline)  # fmt: skip

    def _all_done(self) -> bool:
        return not self.held and all(r.phase is Phase.GONE or r.load == 0 for r in self._serving())

    def _push(self, t: float, kind: int, index: int = 0) -> None:
        self._order += 1
        heapq.heappush(self._events, (t, kind, self._order, index))

    def _handle(self, kind: int, index: int, t: float) -> None:
        s = self.settings
        if kind == READY:
            replica = self.replicas[index]
            if replica.phase is Phase.LOADING:
                replica.became_ready()
                self._ready.append(replica)
                if self.settings.flow_control:
                    self._dispatch(t)
                else:
                    held, self.held = self.held, deque()
                    for request in held:
                        self._route(request, t)
        elif kind == DEADLINE:
            replica = self.replicas[index]
            replica.advance_to(t)
            replica.cut(t)
        elif kind == DISPATCH:
            self._dispatch(t)
        elif kind == SET:
            self._scale(self._schedule[index][1], t)
        elif kind == SCRAPE:
            self._scrape(t)
            self._push(t + s.scrape_interval, SCRAPE)
        elif kind == POLL:
            assert self._keda is not None
            values = self._external_values(t)
            action = self._keda.poll(t, self.desired, values)
            self._scale(action.replicas, t)
            self._push(t + self._keda.scaled_object.polling_interval, POLL)
        elif kind == SYNC:
            assert self._hpa is not None
            decision = self._hpa.sync(t, self._observe(t))
            self._scale(decision.replicas, t)
            self._push(t + s.controller.sync_period, SYNC)

    def _arrive(self, i: int, t: float) -> None:
        a = self.arrivals[i]
        request = ReplayRequest(i, t, max(1, a.prompt), max(1, a.output))
        self.requests.append(request)
        self.gateway_requests += 1
        self._route(request, t)

    def _route(self, request: ReplayRequest, t: float) -> None:
        if self.held and self.settings.flow_control:
            self.held.append(request)  # behind those held first
            return
        best = self._least_loaded(t)
        if best is None:
            request.held = not self._ready
            self.held.append(request)
            if self._ready:
                self._push(t + DISPATCH_TICK, DISPATCH)
        else:
            best.add(request, t)

    def _least_loaded(self, t: float) -> Replica | None:
        """The ready replica holding the fewest requests; None when none is ready or, with flow control, every one
        is saturated."""
        best: Replica | None = None
        least = 0
        for replica in self._ready:
            replica.advance_to(t)
            if self.settings.flow_control and (
                replica.scheduler.waiting >= SATURATED_WAITING or replica.kv_usage >= SATURATED_KV
            ):
                continue
            load = replica.load
            if best is None or load < least:
                best, least = replica, load
        return best

    def _dispatch(self, t: float) -> None:
        while self.held:
            best = self._least_loaded(t)
            if best is None:
                break
            best.add(self.held.popleft(), t)
        if self.held and self._ready:
            self._push(t + DISPATCH_TICK, DISPATCH)

    def _serving(self) -> list[Replica]:
        return [r for r in self._live if r.phase in (Phase.READY, Phase.DRAINING)]

    def _scrape(self, t: float) -> None:
        engines, gpus = [], []
        for replica in self._live:
            replica.advance_to(t)
        self._live = [r for r in self._live if r.gone is None]
        for replica in self._live:
            node = f"node-{replica.index}"
            gpus.append(GpuSample(NAMESPACE, replica.name, node, 100 * replica.busy_share(t)))
            if replica.phase is Phase.LOADING:
                continue  # its GPU is on the collector's page from the pod's start; its engine serves no page yet
            c, sched = replica.counters, replica.scheduler
            engines.append(EngineSample(NAMESPACE, replica.name, node, sched.waiting, sched.running,
                                        replica.kv_usage, c.ttft_sum, c.ttft_count, c.queue_time_sum,
                                        c.queue_time_count, c.success))  # fmt: skip
        gateway = GatewaySample(NAMESPACE, "gateway", len(self.held), self.gateway_requests)
        self.metrics.scrape(Scrape(t, engines, gpus, (gateway,)))
        tl = self.timeline
        arrived = self.gateway_requests - sum(tl.arrivals)
        tl.t.append(t)
        tl.replicas.append(self.desired)
        tl.ready.append(len(self._ready))
        tl.arrivals.append(arrived)

    def _external_values(self, t: float) -> dict[str, float]:
        """What the adapter's scaler answers KEDA for each trigger: a Pods metric's sum over the Deployment's pods
        (``metricType: pods``), else the namespace's external value."""
        assert self.policy.keda is not None
        values = {}
        for trigger in self.policy.keda.triggers:
            value = self._trigger_value(trigger.metric, t)
            if value is not None:
                values[trigger.metric] = value
        return values

    def _trigger_value(self, metric: str, t: float) -> float | None:
        if metric in PODS_METRICS:
            names = {r.name for r in self._live if r.deleted is None}
            values = [v for pod, v in self.metrics.pods_metric(metric, t).items() if pod in names]
            return sum(values) if values else None
        return self.metrics.external_metric(metric, t)

    def _observe(self, t: float) -> Observation:
        assert self._hpa is not None
        spec = self._hpa.spec
        members = [r for r in self._live if r.deleted is None]
        names = {r.name for r in members}
        pods = tuple(Pod(r.name, "Running", r.phase is Phase.READY) for r in members)
        pod_metrics: dict[str, dict[str, float]] = {}
        external: dict[str, tuple[float, ...]] = {}
        for metric in spec.metrics:
            if metric.source == "Pods":
                values = self.metrics.pods_metric(metric.name, t)
                pod_metrics[metric.name] = {pod: v for pod, v in values.items() if pod in names}
            else:
                # KEDA's HPA reads each trigger through KEDA's metrics server, which asks the scaler: the same value
                value = self._trigger_value(metric.name, t)
                if value is not None:
                    external[metric.name] = (value,)
        return Observation(len(members), pods, pod_metrics, {}, external)

    def _scale(self, replicas: int, t: float) -> None:
        current = self.desired
        if replicas == current:
            return
        self.scale_events += 1
        if replicas > current:
            for _ in range(replicas - current):
                self._create(t)
            self.peak = max(self.peak, replicas)
            return
        members = [r for r in self._live if r.deleted is None]
        # a ReplicaSet deletes pods not ready before ready ones, and among each the newest (the most recently
        # created, or made ready) first
        members.sort(key=lambda r: (r.phase is Phase.READY, -r.ready_at))
        for replica in members[: current - replicas]:
            replica.advance_to(t)
            if replica.phase is Phase.READY:
                self._ready.remove(replica)
            replica.delete(t)
            if replica.phase is not Phase.GONE:
                self._push(t + self.settings.grace, DEADLINE, replica.index)

    def _create(self, t: float) -> Replica:
        replica = Replica(len(self.replicas), t, self.settings.cold_start, self.settings.limits, self.cost)
        self.replicas.append(replica)
        self._live.append(replica)
        if t >= 0:
            self._push(replica.ready_at, READY, replica.index)
        return replica
