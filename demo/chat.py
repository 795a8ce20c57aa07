"""The chat Deployment's side of the node: an engine for each of its pods, the gateway in front, and the requests.

This does for the chat pods what the kubelet and a load balancer do: a pod the Deployment adds gets an engine
(demo/engine_replica.py) that serves ``load_seconds`` later, its model loading until then (no /metrics, no
requests). A pod that goes gets no more requests and its engine finishes those it holds, as a server does on SIGTERM,
within the pod's grace period (Kubernetes' default 30 s); what is left then goes back to the gateway (the clients
retry), and a new pod of the same name waits for it to end, its port being the old one's. Requests arrive by the
script as ``gpuscale-load serve``'s Poisson process (loadgen/serving/arrivals.py), wait in the gateway
(demo/gateway.py, its queue on its own /metrics) and go to the ready engines at every ``tick``, 50 times a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from aiohttp import web

from common import connections
from demo.engine_replica import EngineReplica
from demo.gateway import Gateway, GatewayMetrics
from demo.stack import Pod
from loadgen.serving.arrivals import Arrivals
from loadgen.serving.engine import measure_capacity
from loadgen.serving.server import create_app
from loadgen.serving.settings import ServeSpec
from loadgen.serving.steps import ModelClock, SimulatedSteps

TICK = 0.02  # seconds between two looks at arrivals and engines: a request waits in the gateway about half of it
GRACE = 30.0  # terminationGracePeriodSeconds' default
ENGINE_LABEL = "gpuscale.io/inference-engine"  # what the shipped scrape job keeps (manifests/prometheus)


def capacity(spec: ServeSpec) -> float:
    """Requests a second one engine of ``spec`` finishes at most (its batch kept full), as ``serve`` measures it."""
    clock = ModelClock()
    return measure_capacity(SimulatedSteps(clock, spec.cost), spec.limits, spec.prompt, spec.output,
                            clock).requests_per_second  # fmt: skip


def scrape_job(targets: Mapping[str, tuple[str, str, str]]) -> dict[str, Any]:
    """Prometheus's job for the engines and the gateway, ``targets`` (host:port → namespace, pod, node) labelled as
    the shipped ``gpuscale-inference-engines`` job labels the pods it discovers; a target whose pod has no engine
    serving fails its scrapes, and Prometheus marks its series stale, as it does for a pod that has gone. No names are
    rewritten: Debian's Prometheus 2.42 stores ``vllm_num_requests_waiting`` (prometheus_client writes the colon so in
    OpenMetrics), and the adapter's built-in rules read that spelling as they do in a cluster."""
    return {
        "job_name": "gpuscale-inference-engines",
        "static_configs": [
            {"targets": [target], "labels": {"namespace": namespace, "pod": pod, "node": node}}
            for target, (namespace, pod, node) in targets.items()
        ],
    }


class ChatService:
    def __init__(
        self, spec: ServeSpec, ports: Mapping[str, int], gateway_port: int, load_seconds: float, pool: str = "chat"
    ) -> None:
        """``spec``: each engine's settings, and in its rates the requests' (seconds from the start of the run);
        ``ports``: each pod's /metrics port; ``pool``: the gateway's InferencePool."""
        self._spec = spec
        self._ports = dict(ports)
        self._gateway_port = gateway_port
        self.load_seconds = load_seconds
        self.gateway = Gateway()
        self._gateway_metrics = GatewayMetrics(self.gateway, pool, spec.model_name)
        self._gateway_runner: web.AppRunner | None = None
        self._arrivals = Arrivals(spec.rates, spec.prompt, spec.output, spec.seed)
        self._wanted: tuple[str, ...] = ()
        self._replicas: dict[str, EngineReplica] = {}
        self._serves_at: dict[str, float] = {}  # pod → when its model has loaded
        self._leaving: dict[str, tuple[EngineReplica, float]] = {}  # pods gone, their engines finishing: until when
        self._busy: dict[str, tuple[float, float]] = {}  # pod → (when, its engine's busy seconds then)
        self.arrived = 0
        self._finished_before = 0  # by engines that have stopped

    async def __aenter__(self) -> ChatService:
        """The gateway's /metrics listens."""
        limits = connections.Limits()
        self._gateway_runner = connections.runner(create_app(self._gateway_metrics.registry), limits, access_log=None)
        await self._gateway_runner.setup()
        site = connections.BoundedSite(self._gateway_runner, "127.0.0.1", self._gateway_port, limits=limits)
        try:
            await connections.listen(site, f"127.0.0.1:{self._gateway_port} (the gateway's /metrics)")
        except connections.ListenError as e:
            raise RuntimeError(str(e)) from None
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for replica in [*self._replicas.values(), *(r for r, _ in self._leaving.values())]:
            await replica.stop()
        self._replicas.clear()
        self._leaving.clear()
        if self._gateway_runner is not None:
            await self._gateway_runner.cleanup()

    def assign(self, pods: Sequence[Pod]) -> None:
        """The chat Deployment's pods now: engines start and stop to match at the next tick."""
        self._wanted = tuple(p.name for p in pods)

    @property
    def ready(self) -> tuple[str, ...]:
        """The pods whose engine serves (a pod that has gone is not ready, even while its engine finishes)."""
        return tuple(n for n, replica in self._replicas.items() if replica.started and n in self._wanted)

    @property
    def finished(self) -> int:
        """Requests that had all their tokens, by every engine so far."""
        engines = [*self._replicas.values(), *(r for r, _ in self._leaving.values())]
        return self._finished_before + sum(r.finished for r in engines)

    async def tick(self, t: float) -> None:
        """Pods to engines, then the requests that arrived up to ``t`` (seconds from the start) to the ready ones."""
        for name in [n for n in self._replicas if n not in self._wanted]:
            self._leaving[name] = (self._replicas.pop(name), t + GRACE)
            del self._serves_at[name]
            self._busy.pop(name, None)
        for name, (replica, until) in list(self._leaving.items()):
            if not replica.inbox.unfinished() or t >= until:
                del self._leaving[name]
                self.gateway.give_back(await replica.stop())
                self._finished_before += replica.finished
        for name in self._wanted:
            if name in self._leaving:
                continue
            if name not in self._replicas:
                self._replicas[name] = EngineReplica(name, self._ports[name], self._spec)
                self._serves_at[name] = t + self.load_seconds
            elif not self._replicas[name].started and t >= self._serves_at[name]:
                await self._replicas[name].start()
        arrived = self._arrivals.due(t)
        self.arrived += len(arrived)
        self.gateway.arrive(arrived)
        loads = {name: len(self._replicas[name].inbox.unfinished()) for name in self.ready}
        for name, request in self.gateway.hand_out(loads):
            self._replicas[name].inbox.put(request)

    async def run(self, started: float) -> None:
        """``tick`` until cancelled; ``started``: the run's start on ``time.monotonic``."""
        while True:
            await self.tick(time.monotonic() - started)
            await asyncio.sleep(TICK)

    def busy(self, t: float) -> dict[str, float]:
        """Each pod's share of the time since the last call that its engine spent in steps (0 while it loads)."""
        shares = {}
        for name, replica in self._replicas.items():
            seconds = replica.busy_seconds
            then, before = self._busy.get(name, (t, seconds))
            shares[name] = min(1.0, (seconds - before) / (t - then)) if t > then else 0.0
            self._busy[name] = (t, seconds)
        return shares
