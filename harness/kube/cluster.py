"""An adapter served over real TLS with authentication on, and the cluster around it: a client CA, a front-proxy CA,
the ConfigMap kube-system/extension-apiserver-authentication in the fake API server, tokens and RBAC-like grants."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from adapter.app import METRICS
from adapter.backends.auth_api import CONFIGMAP_NAME, CONFIGMAP_NAMESPACE
from harness.kube.api import FakeKubeAPIServer
from harness.kube.pki import CA, Issued, client_context
from harness.kube.reviews import ReviewUser

HPA = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
HPA_TOKEN = "hpa-token-3f9c1d7e5b2a4c6e8f0a1b3c5d7e9f11"
STRANGER_TOKEN = "stranger-token-8e6c4a2f0d1b3e5c7a9f2b4d6e8a0c13"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
HPA_REQUEST = f"{CUSTOM}/namespaces/ml/pods/%2A/gpu_utilization?labelSelector=app%3Dtrainer"


@dataclass
class Cluster:
    """The CAs and credentials of a kubeadm-like control plane."""

    client_ca: CA = field(default_factory=lambda: CA("kubernetes"))
    front_proxy_ca: CA = field(default_factory=lambda: CA("front-proxy-ca"))
    front_proxy: Issued = field(init=False)

    def __post_init__(self) -> None:
        self.front_proxy = self.front_proxy_ca.issue("front-proxy-client")

    def configmap(self, allowed: tuple[str, ...] = ("front-proxy-client",), **override: str) -> dict[str, str]:
        data = {
            "client-ca-file": self.client_ca.pem,
            "requestheader-client-ca-file": self.front_proxy_ca.pem,
            "requestheader-allowed-names": json.dumps(list(allowed)),
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
        }
        return {**data, **override}

    def publish(self, kube: FakeKubeAPIServer, data: Mapping[str, str] | None = None) -> None:
        kube.put("configmaps", CONFIGMAP_NAME, namespace=CONFIGMAP_NAMESPACE, data=dict(data or self.configmap()))


def grant_cluster_roles(kube: FakeKubeAPIServer) -> None:
    """What a cluster with the adapter's manifests grants: the HPA reads metrics, everyone reads discovery."""
    kube.reviews.tokens[HPA_TOKEN] = ReviewUser(
        HPA, uid="hpa-uid", groups=("system:serviceaccounts", "system:serviceaccounts:kube-system")
    )
    kube.reviews.tokens[STRANGER_TOKEN] = ReviewUser("stranger", groups=("developers",))
    kube.reviews.grant(user=HPA, verbs=("get", "list"), api_groups=("custom.metrics.k8s.io", "external.metrics.k8s.io"))
    # system:discovery and system:public-info-viewer, as bound to system:authenticated
    kube.reviews.grant(group="system:authenticated", paths=("/apis", "/apis/*", "/openapi", "/openapi/*"))


@dataclass
class Response:
    status: int
    body: Any
    text: str


class SecureAdapter:
    def __init__(self, app: web.Application, url: str, server_ca: Path, workdir: Path) -> None:
        self.app = app
        self.url = url
        self.server_ca = server_ca
        self.workdir = workdir

    def context(self, identity: Issued | None = None) -> ssl.SSLContext:
        return client_context(self.server_ca, identity, self.workdir / "clients")

    async def get(
        self,
        path: str,
        identity: Issued | None = None,
        headers: Mapping[str, str] | list[tuple[str, str]] | None = None,
        token: str | None = None,
    ) -> Response:
        """One request on a new connection (a new TLS handshake), as ``identity`` and with ``headers``."""
        sent = list(headers.items()) if isinstance(headers, Mapping) else list(headers or [])
        if token is not None:
            sent.append(("Authorization", f"Bearer {token}"))
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.url}{path}", headers=sent, ssl=self.context(identity)) as resp,
        ):
            text = await resp.text()
            body = json.loads(text) if resp.content_type == "application/json" else None
            return Response(resp.status, body, text)

    @property
    def registry(self) -> CollectorRegistry:
        return self.app[METRICS].registry

    def sample(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    async def peer_certificate(self) -> bytes:
        """The serving certificate a new connection gets (DER), whichever it is: no verification here."""
        host, _, port = self.url.removeprefix("https://").rpartition(":")
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        _, writer = await asyncio.open_connection(host, int(port), ssl=ctx)
        der: bytes = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        await writer.wait_closed()
        return der


AGGREGATOR = [("X-Remote-User", "system:kube-aggregator"), ("X-Remote-Group", "system:masters")]


async def status_of(adapter: SecureAdapter, identity: Issued | None, path: str = CUSTOM) -> int | str:
    """The status a request as the aggregator gets, or ``tls`` when the handshake refused the certificate."""
    try:
        return (await adapter.get(path, identity, AGGREGATOR)).status
    except (aiohttp.ClientError, ssl.SSLError):
        return "tls"
