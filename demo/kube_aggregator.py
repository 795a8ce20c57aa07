"""The stand-in API server's aggregation layer: APIServices whose group-version it proxies to an extension API server
(the adapter), as kube-apiserver's kube-aggregator does.

What it reproduces, because kubectl and the adapter depend on it:
- everything under ``/apis/{group}/{version}`` of an APIService is proxied; ``/apis`` and ``/apis/{group}`` are
  answered by the API server itself, which lists the APIServices' groups (``demo/kube_discovery.py``);
- a proxied request keeps its method, path, query and ``Accept``; the caller's credentials stay behind, and the user
  the API server authenticated travels as ``X-Remote-User`` and ``X-Remote-Group`` (one header per group) on a TLS
  connection that presents the front-proxy client certificate and verifies the extension server's certificate
  (the APIService's caBundle);
- the extension server's answer comes back with its status, body and ``Content-Type``; one that cannot be reached is
  a 503 Status, as kube-aggregator answers it.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from yarl import URL

from demo.kube_reviews import ReviewUser
from demo.kube_wire import status_body

# Who the API server's token is: kubeadm's admin, with the group every authenticated user gets.
ADMIN = ReviewUser("kubernetes-admin", groups=("kubeadm:cluster-admins", "system:authenticated"))


@dataclass(frozen=True)
class APIService:
    group: str
    version: str
    url: str  # https://host:port of the extension server
    tls: ssl.SSLContext  # trusts its serving certificate and presents the front-proxy client certificate


class Aggregator:
    def __init__(self, user: ReviewUser = ADMIN) -> None:
        self.user = user
        self.services: list[APIService] = []
        self.proxied: list[tuple[str, dict[str, str]]] = []  # (path_qs, headers sent) of every proxied request
        self._session: aiohttp.ClientSession | None = None

    def service_for(self, path: str) -> APIService | None:
        for service in self.services:
            prefix = f"/apis/{service.group}/{service.version}"
            if path == prefix or path.startswith(prefix + "/"):
                return service
        return None

    async def proxy(self, request: web.Request, service: APIService) -> web.Response:
        headers = [("X-Remote-User", self.user.username)]
        headers += [("X-Remote-Group", group) for group in self.user.groups]
        if "Accept" in request.headers:
            headers.append(("Accept", request.headers["Accept"]))
        self.proxied.append((request.path_qs, dict(headers)))
        self._session = self._session or aiohttp.ClientSession()
        url = URL(f"{service.url}{request.rel_url.raw_path_qs}", encoded=True)  # %2A stays as the client sent it
        try:
            async with self._session.request(request.method, url, headers=headers, ssl=service.tls) as resp:
                body = await resp.read()
                return web.Response(body=body, status=resp.status, headers={"Content-Type": resp.content_type})
        except (aiohttp.ClientError, OSError) as e:
            message = f"error trying to reach service: {e}"
            return web.json_response(status_body(503, "ServiceUnavailable", message), status=503)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
