"""The adapter as the tests run it in process: the cluster its series describe, its settings, and a client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from adapter.backends.prometheus import PrometheusConfig
from adapter.components import COMPONENTS, Components
from adapter.settings import Settings
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import SecureAdapter
from harness.stores import engines, gateways


def populate(kube: FakeKubeAPIServer) -> None:
    """The cluster the series describe."""
    kube.put("namespaces", "ml", {"team": "ml"})
    kube.put("namespaces", "serving", {"team": "inference"})
    kube.put("namespaces", "gpu-system", {"team": "platform"})
    for node, labels in {"node-a": {"pool": "train"}, "node-b": {"pool": "train"}, "node-c": {"pool": "infer"}}.items():
        kube.put("nodes", node, labels)
    kube.put("nodes", "node-d", {"pool": "broken"})
    for pod, labels in {
        "trainer-0": {"app": "trainer"},
        "trainer-1": {"app": "trainer"},
        "broken-0": {"app": "trainer"},
        "other-0": {"app": "other"},
        "share-a": {"app": "share"},
        "share-b": {"app": "share"},
    }.items():
        kube.put("pods", pod, labels, namespace="ml")
    kube.put("pods", "infer-0", {"app": "infer"}, namespace="serving")
    # the inference engines' pods (harness/stores/engines.py)
    served = [*engines.pods(), *gateways.pods()]
    for namespace in sorted({e.namespace for e in served}):
        kube.put("namespaces", namespace, {"team": "inference"})
    for engine in {(e.namespace, e.pod): e for e in served}.values():
        kube.put("pods", engine.pod, {"app": engine.app}, namespace=engine.namespace)


def settings_for(prometheus_url: str, kubeconfig: Path | None, **overrides: Any) -> Settings:
    fields: dict[str, Any] = {
        "prometheus": PrometheusConfig(url=prometheus_url, timeout=5.0),
        "lister_kubeconfig": kubeconfig,
        "insecure_serve_http": True,
        "insecure_disable_auth": True,
        **overrides,
    }
    return Settings(**fields)


class Adapter:
    """A running adapter app and an HTTP client to it."""

    def __init__(self, client: TestClient[web.Request, web.Application]) -> None:
        self.client = client

    @property
    def components(self) -> Components:
        return self.client.app[COMPONENTS]

    async def get(self, path: str, status: int = 200, **params: str) -> Any:
        resp = await self.client.get(path, params=params or None)
        body = await resp.json()
        assert resp.status == status, body
        assert resp.content_type == "application/json"
        return body


MakeSecure = Callable[..., Awaitable[SecureAdapter]]
# an adapter with a plain KEDA scaler on a free port, over a Prometheus URL, given namespaces put in the cluster
MakeKedaAdapter = Callable[..., Awaitable[Adapter]]
