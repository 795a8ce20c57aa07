"""The stand-in API server's aggregation layer: APIServices whose group-version it proxies to an extension API server
(the adapter), as kube-apiserver's kube-aggregator does.

What it reproduces, because kubectl and the adapter depend on it:
- everything under ``/apis/{group}/{version}`` of an APIService is proxied; ``/apis`` and ``/apis/{group}`` are
  answered by the API server itself, which lists the APIServices' groups (``harness/kube/discovery.py``), each
  group's versions in kube-aggregator's order (``SortedByGroupAndVersion``): the highest ``versionPriority`` first,
  then apimachinery's ``CompareKubeAwareVersionStrings`` (GA above beta above alpha, then the higher numbers). The
  first is the group's preferred version, the one kubectl top asks for;
- a proxied request keeps its method, path, query and ``Accept``; the caller's credentials stay behind, and the user
  the API server authenticated travels as ``X-Remote-User`` and ``X-Remote-Group`` (one header per group) on a TLS
  connection that presents the front-proxy client certificate and verifies the extension server's certificate
  (the APIService's caBundle);
- the extension server's answer comes back with its status, body and ``Content-Type``;
- an APIService names a Service whose ready endpoints (``Endpoints``, what the aggregator's EndpointSlice informer
  holds) may be several: each request goes to one of them picked at random, as kube-aggregator's ``ResolveEndpoint``
  picks with ``--enable-aggregator-routing`` (k8s.io/apiserver ``pkg/util/proxy.RandomEndpoint``). A test removes an
  endpoint as the endpoints controller does once a replica is not ready or terminating; with none left the answer
  is a 503 ``service unavailable``;
- connections are kept alive and reused, a pool per endpoint, as Go's transport keeps them;
- a request that fails on its way to or from the endpoint is answered 503 with the error's text in plain text, as
  the proxy's responder writes it (``http.Error``), and is never sent to another endpoint. Below the proxy, Go's
  transport sends a GET once more, to the same endpoint, when a reused keep-alive connection closed before any byte
  of the answer (net/http ``shouldRetryRequest``); aiohttp's client does the same for idempotent requests (on a
  fresh connection too, where Go does not: the second try goes to the endpoint that just failed either way).
"""

from __future__ import annotations

import random
import re
import ssl
from collections import Counter
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from yarl import URL

from harness.kube.reviews import ReviewUser

# Who the API server's token is: kubeadm's admin, with the group every authenticated user gets.
ADMIN = ReviewUser("kubernetes-admin", groups=("kubeadm:cluster-admins", "system:authenticated"))


class Endpoints:
    """The ready endpoints of an extension server's Service, each https://host:port."""

    def __init__(self, *urls: str) -> None:
        self.ready = list(urls)

    def pick(self) -> str | None:
        return random.choice(self.ready) if self.ready else None


@dataclass(frozen=True)
class APIService:
    group: str
    version: str
    endpoints: Endpoints
    tls: ssl.SSLContext  # trusts its serving certificate and presents the front-proxy client certificate
    version_priority: int = 100


_KUBE_VERSION = re.compile(r"v([1-9][0-9]*)(?:(alpha|beta)([1-9][0-9]*))?")
_STABILITY = {"alpha": 0, "beta": 1, None: 2}


def kube_aware_order(version: str) -> tuple[int, int, int, int, str]:
    """A sort key putting versions in ``CompareKubeAwareVersionStrings``' order, the highest first: Kubernetes-like
    versions (GA, then beta, then alpha; within each the higher major, then the higher minor), then any other in
    alphabetical order."""
    match = _KUBE_VERSION.fullmatch(version)
    if match is None:
        return (1, 0, 0, 0, version)
    major, stability, minor = match.groups()
    return (0, -_STABILITY[stability], -int(major), -int(minor or 0), "")


class Aggregator:
    def __init__(self, user: ReviewUser = ADMIN) -> None:
        self.user = user
        self.services: list[APIService] = []
        self.proxied: list[tuple[str, dict[str, str]]] = []  # (path_qs, headers sent) of every proxied request
        self.sent: Counter[str] = Counter()  # requests sent to each endpoint
        self.in_flight: Counter[str] = Counter()  # of those, the ones not answered yet
        self._session: aiohttp.ClientSession | None = None

    def group_versions(self) -> list[tuple[str, str]]:
        """(group, version) of every APIService, each group's in kube-aggregator's order (the preferred first)."""
        groups = list(dict.fromkeys(s.group for s in self.services))
        ordered = sorted(
            self.services, key=lambda s: (groups.index(s.group), -s.version_priority, kube_aware_order(s.version))
        )
        return [(s.group, s.version) for s in ordered]

    def service_for(self, path: str) -> APIService | None:
        for service in self.services:
            prefix = f"/apis/{service.group}/{service.version}"
            if path == prefix or path.startswith(prefix + "/"):
                return service
        return None

    async def proxy(self, request: web.Request, service: APIService) -> web.Response:
        endpoint = service.endpoints.pick()
        if endpoint is None:
            return _unavailable("service unavailable")
        headers = [("X-Remote-User", self.user.username)]
        headers += [("X-Remote-Group", group) for group in self.user.groups]
        if "Accept" in request.headers:
            headers.append(("Accept", request.headers["Accept"]))
        self.proxied.append((request.path_qs, dict(headers)))
        self._session = self._session or aiohttp.ClientSession()
        url = URL(f"{endpoint}{request.rel_url.raw_path_qs}", encoded=True)  # %2A stays as the client sent it
        self.sent[endpoint] += 1
        self.in_flight[endpoint] += 1
        try:
            async with self._session.request(request.method, url, headers=headers, ssl=service.tls) as resp:
                body = await resp.read()
                return web.Response(body=body, status=resp.status, headers={"Content-Type": resp.content_type})
        except (aiohttp.ClientError, OSError) as e:
            return _unavailable(str(e) or type(e).__name__)
        finally:
            self.in_flight[endpoint] -= 1

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _unavailable(message: str) -> web.Response:
    """A 503 as Go's ``http.Error`` writes it, which is how kube-aggregator answers a request it could not proxy."""
    headers = {"X-Content-Type-Options": "nosniff"}
    return web.Response(status=503, text=message + "\n", content_type="text/plain", charset="utf-8", headers=headers)
