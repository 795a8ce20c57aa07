"""A stand-in Kubernetes API server: LIST and WATCH for any resource, over real HTTP, as kube-apiserver answers them.

What it reproduces, because the adapter's reflector depends on it:
- one resourceVersion counter for all objects; every change bumps it and is recorded as a watch event;
- LIST returns ``metadata.resourceVersion``, honours ``labelSelector`` and pages with ``limit``/``continue``;
- WATCH from a version replays the newer events, then streams live ones as JSON lines until ``timeoutSeconds``;
- a version older than the compaction point gets an ERROR event carrying a 410 ``Expired`` Status, as the watch cache
  sends it ("too old resource version"); an expired ``continue`` token gets an HTTP 410;
- BOOKMARK events on request, for watches that allowed them;
- watches held unanswered (``hold_watches``): the request accepted and no head sent, as from an API server or proxy
  that hangs;
- bearer-token authentication (401 without it), and client certificates when started with a client CA
  (``--client-ca-file``): a verified certificate authenticates as its CN, whatever token comes with it;
- raw lines sent down open watches (``inject``), for answers no API server should send: a line over the client's
  limit, a JSON value that is not an event, an object of the wrong shape;
- metadata only (``PartialObjectMetadata``, ``PartialObjectMetadataList``) when the ``Accept`` header asks for it,
  for a GET, a LIST or a WATCH; 406 NotAcceptable when it offers nothing servable (``harness/kube/wire.py``);
- ConfigMaps with ``data`` (listed and watched like any object, e.g. with a ``metadata.name`` field selector);
- TokenReview and SubjectAccessReview (``harness/kube/reviews.py``), answered from ``self.reviews``;
- GET of one object (404 ``<resource> "<name>" not found``); objects with a ``status`` (a node's ``allocatable``);
  lists under their kind (``NodeList``: typed clients such as kubectl's decode no other);
- RBAC refusals: a GET, LIST or WATCH of a (resource, namespace) in ``self.forbidden`` (namespace None: across all
  namespaces, or a cluster-scoped resource) answers 403 as RBAC words it;
- TLS when started with a serving certificate (and the CA that issued it, or the certificate its own CA): kubectl
  sends a bearer token over TLS only;
- API discovery, legacy and aggregated (``harness/kube/discovery.py``): the core group, the server's other groups and
  those of the APIServices; only the resources it lists are served (any other answers 404, as from kube-apiserver),
  custom resources once ``discovery.add`` installed them;
- the aggregation layer (``harness/kube/aggregator.py``): APIServices in ``self.aggregator``, whose group-versions are
  proxied to their extension server.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web
from aiohttp.typedefs import Handler

from harness.kube.aggregator import Aggregator
from harness.kube.discovery import Discovery
from harness.kube.reviews import Reviews
from harness.kube.wire import PARTIAL, LabelSelector, SelectorError, partial, representation, status_body

TOKEN = "fake-token"
USER = "system:serviceaccount:gpuscale:gpuscale-collector"  # who TOKEN authenticates, as RBAC names it
# /version, as a 1.34 kube-apiserver answers it (Helm reads it before it renders against a cluster)
VERSION = {
    "major": "1", "minor": "34", "gitVersion": "v1.34.0", "gitCommit": "", "gitTreeState": "clean",
    "buildDate": "2025-08-27T00:00:00Z", "goVersion": "go1.24.6", "compiler": "gc", "platform": "linux/amd64",
}  # fmt: skip


def is_true(value: str | None) -> bool:
    """A boolean query parameter as kube-apiserver reads it (apimachinery's ``Convert_Slice_string_To_bool``):
    true unless absent, empty, ``0`` or ``false`` in any case, so ``watch=True`` (kubernetes_asyncio's) watches."""
    return value is not None and value != "" and value != "0" and value.lower() != "false"


@dataclass
class _Watch:
    resource: str
    namespace: str | None
    bookmarks: bool
    field_selector: str = ""
    metadata_only: bool = False  # asked for PartialObjectMetadata
    # an event, raw bytes sent as they are (``inject``), or None to end the watch
    queue: asyncio.Queue[dict[str, Any] | bytes | None] = field(default_factory=asyncio.Queue)


class FakeKubeAPIServer:
    def __init__(self) -> None:
        self.resource_version = 1000
        self.compacted = 0
        self.objects: dict[str, dict[tuple[str | None, str], dict[str, Any]]] = {}
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.watches: list[_Watch] = []
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.users: list[str] = []  # who each authenticated request came from (USER, or a certificate's CN)
        self.expire_continue_tokens = False
        self.expire_watches = False  # every watch answers 410 at once, as if each version were compacted away
        self.hold_watches = False  # a watch gets no answer at all until the client gives up (a hung server or proxy)
        self.held_watches = 0  # how many were held so
        self.fail_lists = 0
        self.forbidden: set[tuple[str, str | None]] = set()  # (resource, namespace) the token may not get
        self.reviews = Reviews()
        self.aggregator = Aggregator()
        self.discovery = Discovery(api_services=self.aggregator.group_versions)
        self._pages: dict[str, tuple[list[dict[str, Any]], str]] = {}
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.ca: Path | None = None  # the serving certificate clients trust, when served over TLS

    # --- the test's side -------------------------------------------------------------------------------------

    def put(
        self,
        resource: str,
        name: str,
        labels: dict[str, str] | None = None,
        namespace: str | None = None,
        uid: str | None = None,
        spec: dict[str, Any] | None = None,
        data: dict[str, str] | None = None,
        status: dict[str, Any] | None = None,
    ) -> None:
        """Create or update an object (``resource`` as ``pods`` or ``deployments.apps``; ``data`` for ConfigMaps,
        ``status`` for what the object reports: a node's ``allocatable``)."""
        if self.discovery.find(resource) is None:
            raise ValueError(f"{resource} is not served: add it first (discovery.add, as a CRD would)")
        key = (namespace, name)
        kind = "MODIFIED" if key in self.objects.get(resource, {}) else "ADDED"
        self.resource_version += 1
        obj = self._object(resource, name, namespace, labels or {}, uid, spec)
        if data is not None:
            del obj["spec"]
            obj["data"] = dict(data)
        if status is not None:
            obj["status"] = dict(status)
        self.objects.setdefault(resource, {})[key] = obj
        self._record(kind, resource, obj)

    def delete(self, resource: str, name: str, namespace: str | None = None) -> None:
        obj = self.objects[resource].pop((namespace, name))
        self.resource_version += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.resource_version)}}
        self._record("DELETED", resource, obj)

    def compact(self) -> None:
        """Forget all history, as etcd's compaction at the current revision: a watch from an older version now gets
        410 Gone (one from the current version goes on, as kube-apiserver's does)."""
        self.compacted = self.resource_version
        self.history.clear()

    def close_watches(self) -> None:
        """End every open watch, as the API server does at timeoutSeconds or on restart."""
        for watch in self.watches:
            watch.queue.put_nowait(None)

    def inject(self, resource: str, raw: bytes) -> int:
        """Send ``raw`` as it is down every open watch of ``resource`` (its field selector ignored); how many."""
        watches = [w for w in self.watches if w.resource == resource]
        for watch in watches:
            watch.queue.put_nowait(raw)
        return len(watches)

    def bookmark(self) -> None:
        for watch in self.watches:
            if watch.bookmarks:
                rv = str(self.resource_version)
                watch.queue.put_nowait({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": rv}}})

    def count(self, path: str, watch: bool = False) -> int:
        return sum(1 for p, q in self.requests if p == path and is_true(q.get("watch")) == watch)

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": self._cluster()}],
                    "users": [{"name": "fake", "user": {"token": TOKEN}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )
        return path

    def _cluster(self) -> dict[str, str]:
        if self.ca is None:
            return {"server": self.url}
        return {"server": self.url, "certificate-authority": str(self.ca)}

    async def start(
        self, serving: tuple[Path, Path] | None = None, ca: Path | None = None, client_ca: Path | None = None
    ) -> str:
        """Serve on 127.0.0.1; over TLS with ``serving`` (certificate and key files; ``ca`` the CA that issued the
        certificate, else the certificate is its own): kubectl sends a bearer token only over TLS. ``client_ca``:
        client certificates it issued authenticate their CN, as kube-apiserver's ``--client-ca-file``."""
        app = web.Application(middlewares=[self._aggregate])
        handle = self._authenticated(self._handle)
        self.discovery.add_routes(app, self._authenticated)
        app.router.add_get("/version", self._authenticated(self._version))
        get_one = self._authenticated(self._get_one)
        app.router.add_get("/api/{version}/{resource}/{name}", get_one)
        app.router.add_get("/api/{version}/namespaces/{namespace}/{resource}/{name}", get_one)
        app.router.add_get("/apis/{group}/{version}/{resource}/{name}", get_one)
        app.router.add_get("/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}", get_one)
        app.router.add_get("/api/{version}/{resource}", handle)
        app.router.add_get("/api/{version}/namespaces/{namespace}/{resource}", handle)
        app.router.add_get("/apis/{group}/{version}/{resource}", handle)
        app.router.add_get("/apis/{group}/{version}/namespaces/{namespace}/{resource}", handle)
        app.router.add_post(
            "/apis/authentication.k8s.io/v1/tokenreviews", self._authenticated(self.reviews.token_review)
        )
        app.router.add_post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews", self._authenticated(self.reviews.access_review)
        )
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        tls = None
        if serving is not None:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(*serving)
            self.ca = ca or serving[0]
            if client_ca is not None:
                tls.verify_mode = ssl.CERT_OPTIONAL  # asked for, verified when sent; a token does without one
                tls.load_verify_locations(cafile=str(client_ca))
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=tls)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        self.close_watches()
        if self._runner:
            await self._runner.cleanup()
        await self.aggregator.close()

    # --- the API server's side --------------------------------------------------------------------------------

    def _object(
        self,
        resource: str,
        name: str,
        namespace: str | None,
        labels: dict[str, str],
        uid: str | None = None,
        spec: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        served = self.discovery.find(resource)
        assert served is not None  # put checked it
        meta: dict[str, Any] = {
            "name": name,
            "uid": uid or f"uid-{name}",
            "resourceVersion": str(self.resource_version),
        }
        if namespace is not None:
            meta["namespace"] = namespace
        if labels:
            meta["labels"] = dict(labels)
        return {
            "kind": served.kind,
            "apiVersion": f"{served.group}/{served.versions[0]}" if served.group else served.versions[0],
            "metadata": meta,
            "spec": dict(spec or {}),
        }

    def _record(self, kind: str, resource: str, obj: dict[str, Any]) -> None:
        event = {"type": kind, "object": obj}
        self.history.append((self.resource_version, resource, event))
        for watch in self.watches:
            if (
                watch.resource == resource
                and watch.namespace in (None, obj["metadata"].get("namespace"))
                and _fields_match(obj, watch.field_selector)
            ):
                watch.queue.put_nowait(event)

    def _authenticated(self, handler: Handler) -> Handler:
        async def checked(request: web.Request) -> web.StreamResponse:
            self.requests.append((request.path, dict(request.query)))
            user = _certificate_user(request)  # kube-apiserver's x509 authenticator comes before its token ones
            if user is None and request.headers.get("Authorization") == f"Bearer {TOKEN}":
                user = USER
            if user is None:
                return status_response(401, "Unauthorized", "Unauthorized")
            self.users.append(user)
            return await handler(request)

        return checked

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response(VERSION)

    async def _get_one(self, request: web.Request) -> web.Response:
        info = request.match_info
        resource = info["resource"] + (f".{info['group']}" if "group" in info else "")
        namespace = info.get("namespace")
        if (resource, namespace) in self.forbidden:
            return self._forbidden(request, "get")
        obj = self.objects.get(resource, {}).get((namespace, info["name"]))
        if obj is None:
            return status_response(404, "NotFound", f'{info["resource"]} "{info["name"]}" not found')
        shape = representation(request.headers.get("Accept"), PARTIAL)
        if shape is None:
            return not_acceptable(request)
        return web.json_response(partial(obj) if shape else obj)

    @staticmethod
    def _forbidden(request: web.Request, verb: str) -> web.Response:
        """403 as RBAC's authorizer words it: the object's name for a GET, the scope asked."""
        info = request.match_info
        namespace = info.get("namespace")
        where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        what = f'{info["resource"]} "{info["name"]}"' if "name" in info else info["resource"]
        return status_response(
            403, "Forbidden", f'{what} is forbidden: User "{USER}" cannot {verb} resource "{info["resource"]}" in API '
            f'group "{info.get("group", "")}"{where}'
        )  # fmt: skip

    @web.middleware
    async def _aggregate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Requests for an APIService's group-version go to its extension server, authenticated here first."""
        service = self.aggregator.service_for(request.path)
        if service is None:
            return await handler(request)
        return await self._authenticated(lambda r: self.aggregator.proxy(r, service))(request)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        info = request.match_info
        resource = info["resource"] + (f".{info['group']}" if "group" in info else "")
        namespace = info.get("namespace")
        served = self.discovery.find(resource)
        if served is None or info["version"] not in served.versions or (namespace and not served.namespaced):
            return status_response(404, "NotFound", "the server could not find the requested resource")
        if (resource, namespace) in self.forbidden:
            return self._forbidden(request, "watch" if is_true(query.get("watch")) else "list")
        watch = is_true(query.get("watch"))
        shape = representation(request.headers.get("Accept"), PARTIAL if watch else f"{PARTIAL}List")
        if shape is None:
            return not_acceptable(request)
        if watch:
            return await self._watch(request, resource, namespace, query, bool(shape))
        return self._list(resource, namespace, query, bool(shape))

    def _list(self, resource: str, namespace: str | None, query: dict[str, str], metadata_only: bool) -> web.Response:
        if self.fail_lists:
            self.fail_lists -= 1
            return status_response(500, "InternalError", "etcdserver: request timed out")
        token = query.get("continue")
        if token:
            if self.expire_continue_tokens or token not in self._pages:
                return status_response(410, "Expired", "The provided continue parameter is too old")
            items, rv = self._pages.pop(token)
        else:
            try:
                selector = LabelSelector(query.get("labelSelector", ""))
            except SelectorError as e:
                return status_response(400, "BadRequest", str(e))
            items = [
                obj
                for (ns, _), obj in sorted(
                    self.objects.get(resource, {}).items(), key=lambda kv: (kv[0][0] or "", kv[0][1])
                )
                if namespace in (None, ns)
                and selector.matches(obj["metadata"].get("labels", {}))
                and _fields_match(obj, query.get("fieldSelector", ""))
            ]
            rv = str(self.resource_version)
        limit = int(query.get("limit") or 0)
        metadata: dict[str, str] = {"resourceVersion": rv}
        if limit and len(items) > limit:
            next_token = f"page-{len(self._pages)}-{rv}-{len(items)}"
            self._pages[next_token] = (items[limit:], rv)
            items = items[:limit]
            metadata["continue"] = next_token
        # typed clients (kubectl's) decode a list only under its own kind: NodeList, not List
        served = self.discovery.find(resource)
        kind = f"{served.kind}List" if served is not None else "List"
        api_version = f"{served.group}/{served.versions[0]}" if served is not None and served.group else "v1"
        if metadata_only:
            kind, api_version, items = f"{PARTIAL}List", "meta.k8s.io/v1", [partial(obj) for obj in items]
        body = {"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": items}
        return web.json_response(body)

    async def _watch(
        self, request: web.Request, resource: str, namespace: str | None, query: dict[str, str], metadata_only: bool
    ) -> web.StreamResponse:
        if self.hold_watches:
            self.held_watches += 1
            await asyncio.Event().wait()  # until the client closes the connection, which cancels this handler
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        since = int(query.get("resourceVersion") or 0)
        if self.expire_watches or (since and since < self.compacted):
            expired = status_body(410, "Expired", f"too old resource version: {since} ({self.compacted})")
            await resp.write(json.dumps({"type": "ERROR", "object": expired}).encode() + b"\n")
            return resp
        watch = _Watch(
            resource,
            namespace,
            is_true(query.get("allowWatchBookmarks")),
            query.get("fieldSelector", ""),
            metadata_only,
        )
        if not since:
            for (ns, _), obj in self.objects.get(resource, {}).items():
                if namespace in (None, ns) and _fields_match(obj, watch.field_selector):
                    watch.queue.put_nowait({"type": "ADDED", "object": obj})
        for rv, res, event in self.history:
            if (
                rv > since
                and res == resource
                and namespace in (None, event["object"]["metadata"].get("namespace"))
                and _fields_match(event["object"], watch.field_selector)
            ):
                watch.queue.put_nowait(event)
        self.watches.append(watch)
        timeout = float(query.get("timeoutSeconds") or 1800)
        try:
            async with asyncio.timeout(timeout):
                while (queued := await watch.queue.get()) is not None:
                    if isinstance(queued, dict) and watch.metadata_only and queued["type"] != "ERROR":
                        queued = {**queued, "object": partial(queued["object"])}
                    await resp.write(queued if isinstance(queued, bytes) else json.dumps(queued).encode() + b"\n")
        except (TimeoutError, ConnectionError):  # the client went away (it may refuse what was sent)
            pass
        finally:
            self.watches.remove(watch)
        return resp


def _certificate_user(request: web.Request) -> str | None:
    """The CN of the client certificate the TLS layer verified against the client CA, if one was sent."""
    peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
    for entry in (peer or {}).get("subject", ()):
        for key, value in entry:
            if key == "commonName":
                return str(value)
    return None


def _fields_match(obj: dict[str, Any], selector: str) -> bool:
    """``spec.nodeName=x,metadata.name=y``: the field selectors the API server supports for pods, equality only."""
    for term in filter(None, selector.split(",")):
        path, _, want = term.partition("=")
        value: Any = obj
        for part in path.split("."):
            value = value.get(part, "") if isinstance(value, dict) else ""
        if str(value) != want:
            return False
    return True


def not_acceptable(request: web.Request) -> web.Response:
    return status_response(
        406, "NotAcceptable", f"only the following media types are accepted: application/json (asked: "
        f"{request.headers.get('Accept')})"
    )  # fmt: skip


def status_response(code: int, reason: str, message: str) -> web.Response:
    """An error as kube-apiserver sends it: a ``Status`` object with the same code."""
    return web.json_response(status_body(code, reason, message), status=code)
