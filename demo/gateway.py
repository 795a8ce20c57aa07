"""The gateway in front of the chat Deployment: where requests wait while no replica is ready to take them.

With no replica, a request has nowhere to go, and a signal from inside the pods (``vllm:num_requests_waiting``)
cannot exist; a gateway with a queue, as the Gateway API inference extension's endpoint picker keeps one with flow
control on, holds the request and says so on its own /metrics, under the endpoint picker's gauge
``inference_extension_flow_control_queue_size`` (its name, help and labels; the adapter's ``inference_demand`` adds it
to the engines' queues). Once replicas are ready, every request goes to one at once, each to the replica holding the
fewest (join the shortest queue, as a load balancer's least-request policy does); their engines queue what they cannot
run yet, as vLLM does. Replicas that go give back what they held (the clients retry), at the head of the queue.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from loadgen.serving.request import Request

QUEUE_SIZE = "inference_extension_flow_control_queue_size"
QUEUE_HELP = "[ALPHA] Current number of requests actively held in the Flow Control queue."


class Gateway:
    def __init__(self) -> None:
        self._queue: deque[Request] = deque()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def arrive(self, requests: Iterable[Request]) -> None:
        self._queue.extend(requests)

    def give_back(self, requests: Iterable[Request]) -> None:
        """Requests a replica held when it went: ahead of the others, in the order they had."""
        self._queue.extendleft(reversed(list(requests)))

    def hand_out(self, loads: Mapping[str, int]) -> list[tuple[str, Request]]:
        """Every waiting request, to the ready replicas of ``loads`` (replica → the requests it holds now), each to
        the one that holds the fewest at that moment, ties to the one named first; none while no replica is ready."""
        if not loads:
            return []
        held = dict(loads)
        out = []
        while self._queue:
            replica = min(held, key=held.__getitem__)  # min keeps the first of equals
            out.append((replica, self._queue.popleft()))
            held[replica] += 1
        return out


class GatewayMetrics(Collector):
    """The gateway's /metrics: its queue, read at every scrape."""

    def __init__(self, gateway: Gateway, pool: str, model: str) -> None:
        self._gateway = gateway
        self._labels = {"fairness_id": "default", "inference_pool": pool, "model_name": model, "priority": "0",
                        "target_model_name": model}  # fmt: skip
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(QUEUE_SIZE, QUEUE_HELP, labels=list(self._labels))
        family.add_metric(list(self._labels.values()), self._gateway.waiting)
        yield family
