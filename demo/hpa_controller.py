"""The HPA controller's sync for the demo's Deployments: what an HPA reads, over HTTP, and the scale it sets.

``HpaController`` (a Pods metric): each sync lists the pods the HPA's selector matches from the Kubernetes API, asks
the custom metrics API for their metric as the HPA does (the same path, selector and Accept header), lets
demo/hpa.py decide and scales the Deployment. ``ExternalHpaController`` (an External metric): each sync asks the
external metrics API for the metric in the HPA's namespace, and decides from the sum of its items and the
Deployment's replicas. Nothing else is read: not Prometheus, not the collector, not the workload, not the engines.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

import aiohttp

from demo.deployment import Deployment
from demo.hpa import Autoscaler, Decision, propose_external
from harness.kube.wire import parse_quantity

CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
HPA_ACCEPT = "application/vnd.kubernetes.protobuf, */*"  # what the HPA's client sends; the adapter answers JSON


@dataclass(frozen=True)
class Sync:
    at: float  # seconds since the run started
    pods: tuple[str, ...]  # what the selector matched
    values: dict[str, float]  # what the custom metrics API returned, per pod
    decision: Decision
    answer: str  # the custom metrics API's answer as it came
    error: str = ""  # why there are no values, when the API refused or could not be reached


async def get_metric_list(session: aiohttp.ClientSession, url: str, api: str) -> tuple[list[Any], str, str]:
    """A metric list's items, the answer as it came, and why there are none (empty when there are); ``api``:
    ``custom`` or ``external``, for the message."""
    try:
        async with session.get(url, headers={"Accept": HPA_ACCEPT}) as r:
            answer = await r.text()
            status = r.status
    except (aiohttp.ClientError, TimeoutError) as e:
        return [], "", f"the {api} metrics API cannot be reached: {e or type(e).__name__}"
    try:
        body = json.loads(answer)
        if status != 200:
            return [], answer, f"the {api} metrics API answered {status}: {body.get('message', '')}"
        items = body["items"]
        if not isinstance(items, list):
            raise TypeError
    except (ValueError, KeyError, TypeError, AttributeError):
        return [], answer, f"the {api} metrics API answered {status} with something that is not a metric list"
    return items, answer, ""


class HpaController:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        adapter_url: str,
        kube_url: str,
        kube_token: str,
        namespace: str,
        metric: str,
        deployment: Deployment,
        autoscaler: Autoscaler,
    ) -> None:
        self._session = session
        self._adapter_url = adapter_url
        self._kube_url = kube_url
        self._kube_token = kube_token
        self.namespace = namespace
        self.metric = metric
        self._deployment = deployment
        self.autoscaler = autoscaler
        self.selector = ",".join(f"{k}={v}" for k, v in deployment.labels.items())

    def metric_path(self, star: str = "%2A") -> str:
        """The path the HPA asks (``*`` percent-encoded, as it sends it; pass ``star="*"`` for what a user types)."""
        selector = urllib.parse.quote(self.selector, safe="")
        return f"{CUSTOM}/namespaces/{self.namespace}/pods/{star}/{self.metric}?labelSelector={selector}"

    async def _pods(self) -> tuple[str, ...]:
        selector = urllib.parse.quote(self.selector, safe="")
        url = f"{self._kube_url}/api/v1/namespaces/{self.namespace}/pods?labelSelector={selector}"
        async with self._session.get(url, headers={"Authorization": f"Bearer {self._kube_token}"}) as resp:
            resp.raise_for_status()
            body = await resp.json()
        return tuple(item["metadata"]["name"] for item in body["items"])

    async def _values(self) -> tuple[dict[str, float], str, str]:
        """Pod → value, the answer as it came, and why there are no values (empty when there are)."""
        items, answer, error = await get_metric_list(self._session, self._adapter_url + self.metric_path(), "custom")
        try:
            values = {i["describedObject"]["name"]: float(parse_quantity(i["value"])) for i in items}
        except (ValueError, KeyError, TypeError, AttributeError):
            return {}, answer, "the custom metrics API answered 200 with something that is not a metric list"
        return values, answer, error

    async def sync(self, at: float) -> Sync:
        pods = await self._pods()
        values, answer, error = await self._values()
        decision = self.autoscaler.decide(at, self._deployment.replicas, pods, values)
        if decision.scales:
            self._deployment.scale(decision.replicas)
        return Sync(at, pods, values, decision, answer, error)


@dataclass(frozen=True)
class ExternalSync:
    at: float  # seconds since the run started
    values: tuple[float, ...]  # the items' values the external metrics API returned
    decision: Decision
    answer: str  # the external metrics API's answer as it came
    error: str = ""  # why there are no values, when the API refused or could not be reached


class ExternalHpaController:
    """An HPA on an External metric with an AverageValue target (``per_pod``) or a Value target."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        adapter_url: str,
        namespace: str,
        metric: str,
        deployment: Deployment,
        autoscaler: Autoscaler,
        per_pod: bool = True,
    ) -> None:
        self._session = session
        self._adapter_url = adapter_url
        self.namespace = namespace
        self.metric = metric
        self._deployment = deployment
        self.autoscaler = autoscaler
        self.per_pod = per_pod

    def metric_path(self) -> str:
        return f"{EXTERNAL}/namespaces/{self.namespace}/{self.metric}"

    async def sync(self, at: float) -> ExternalSync:
        url = self._adapter_url + self.metric_path()
        items, answer, error = await get_metric_list(self._session, url, "external")
        try:
            values = tuple(float(parse_quantity(item["value"])) for item in items)
        except (ValueError, KeyError, TypeError):
            values, error = (), "the external metrics API answered 200 with something that is not a metric list"
        current = self._deployment.replicas
        # the ready pods count only for a Value target; the demo's is AverageValue, so the replicas stand for them
        proposal = propose_external(current, current, values, self.autoscaler.spec, self.per_pod)
        decision = self.autoscaler.settle(at, current, proposal)
        if decision.scales:
            self._deployment.scale(decision.replicas)
        return ExternalSync(at, values, decision, answer, error)
