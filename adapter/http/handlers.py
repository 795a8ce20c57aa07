"""HTTP routes: URL → provider call → JSON. Every error leaves as a Kubernetes ``Status``, never a traceback."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from adapter.api import openapi as documents
from adapter.api.objects import (
    api_group,
    api_group_list,
    api_resource_list,
    external_value_list,
    status,
)
from adapter.api.paths import (
    CUSTOM_GROUP,
    EXTERNAL_GROUP,
    NO_SUCH_PATH,
    RESOURCE_GROUP,
    CustomRequest,
    ExternalRequest,
    ResourceListRequest,
    parse_metrics_path,
)
from adapter.components import COMPONENTS, Components
from adapter.errors import AdapterError, BackendError, NotFound
from adapter.http import health, resource_routes
from adapter.http.scaler_questions import scaler_question
from adapter.provider import explain as explaining
from adapter.query.list_options import refuse_watch

log = logging.getLogger(__name__)

ROUTE = web.RequestKey("route", str)
_HTTP_REASONS = {
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    413: "RequestEntityTooLarge",
}
_ROUTES_BY_PREFIX = (("/apis", ""), ("/openapi", "openapi"), ("/explain", "explain"), ("/metrics", "metrics"))


def _dumps(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _json(body: Any, code: int = 200) -> web.Response:
    return web.Response(body=_dumps(body), status=code, content_type="application/json")


def _status_response(code: int, reason: str, message: str) -> web.Response:
    return _json(status(code, reason, message), code)


@web.middleware
async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Time every request by route kind, and turn every failure into a Status object."""
    started = time.perf_counter()
    try:
        response = await handler(request)
    except AdapterError as e:
        if isinstance(e, BackendError) or e.code >= 500:
            log.warning("%s %s: %s", request.method, request.path_qs, e)
        response = _status_response(e.code, e.reason, e.client_message)
    except web.HTTPException as e:
        reason = _HTTP_REASONS.get(e.status, "BadRequest" if e.status < 500 else "InternalError")
        message = NO_SUCH_PATH if e.status == 404 else f"{e.reason}: the metrics APIs answer GET requests"
        response = _status_response(e.status, reason, message)
    except Exception:
        log.exception("unexpected error answering %s %s", request.method, request.path_qs)
        response = _status_response(500, "InternalError", "an internal error occurred; see the adapter's log")
    route = request.get(ROUTE) or _route_of(request)
    components: Components | None = request.app.get(COMPONENTS)
    if components is not None:
        metrics = components.metrics
        metrics.request_seconds.labels(route, str(response.status)).observe(time.perf_counter() - started)
        if response.status >= 400:
            reason = _HTTP_REASONS.get(response.status) or ("BadRequest" if response.status < 500 else "ServerError")
            metrics.errors.labels(route, reason).inc()
    return response


def _route_of(request: web.Request) -> str:
    """The route label of a request no handler labelled (refused before it got there, or unknown)."""
    path = request.rel_url.raw_path
    if path in ("/healthz", "/livez", "/readyz"):
        return "health"
    for prefix, route in _ROUTES_BY_PREFIX:
        if path == prefix or path.startswith(prefix + "/"):
            return route or _route_kind(path)
    return "other"


def _components(request: web.Request) -> Components:
    return request.app[COMPONENTS]


async def apis(request: web.Request) -> web.Response:
    request[ROUTE] = "discovery"
    return _json(api_group_list(_components(request).provider.served_groups()))


async def group(request: web.Request) -> web.Response:
    request[ROUTE] = "discovery"
    name = request.match_info["group"]
    if name not in _components(request).provider.served_groups():
        raise NotFound(NO_SUCH_PATH)
    return _json(api_group(name))


def _route_kind(raw_path: str) -> str:
    """The route label for latency and errors, from the path alone (so requests that fail to parse get one too)."""
    segments = raw_path.strip("/").split("/")
    if len(segments) <= 3:
        return "discovery"
    if segments[1] == EXTERNAL_GROUP:
        return "external"
    if segments[1] == RESOURCE_GROUP:
        return "resource"
    return "custom_wildcard" if segments[-2] in ("*", "%2A", "%2a") else "custom_object"


async def metrics_api(request: web.Request) -> web.Response:
    raw_path = request.rel_url.raw_path
    request[ROUTE] = _route_kind(raw_path)
    c = _components(request)
    req = parse_metrics_path(raw_path, request.query)
    if isinstance(req, ResourceListRequest):
        if req.group not in c.provider.served_groups():
            raise NotFound(NO_SUCH_PATH)
        # Always 200, from memory, even with no metrics: the aggregator's availability check reads this path, and
        # an error here marks the APIService unavailable, which fails discovery cluster-wide (stuck namespace
        # deletion, kubectl errors). An empty list costs a client-side log line (client-go's memory cache says "Got
        # empty response"); why it is empty is in /readyz?verbose and the log.
        return _json(api_resource_list(req.group, req.version, c.provider.resource_entries(req.group)))
    if isinstance(req, CustomRequest):
        if req.name is None:
            refuse_watch(request.query, f"{req.resource.resource}.{req.resource.group or CUSTOM_GROUP}")
        answer = await c.provider.custom(req)
        return web.Response(body=answer.body(req.version), content_type="application/json")
    assert isinstance(req, ExternalRequest)
    refuse_watch(request.query, f"{req.metric}.{EXTERNAL_GROUP}")
    return _json(external_value_list(req.version, await c.provider.external(req)))


async def explain(request: web.Request) -> web.Response:
    request[ROUTE] = "explain"
    c = _components(request)
    scaler_question(request.rel_url.raw_path, dict(request.query))  # a scaler request left as it came: why (400)
    raw = request.rel_url.raw_path.removeprefix("/explain")
    return _json(await explaining.explain(c.provider, raw, request.query))


async def self_metrics(request: web.Request) -> web.Response:
    request[ROUTE] = "metrics"
    body = generate_latest(_components(request).metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _document(request: web.Request, body: bytes) -> web.Response:
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers={"ETag": etag})
    return web.Response(body=body, content_type="application/json", headers={"ETag": etag})


async def openapi_v2(request: web.Request) -> web.Response:
    request[ROUTE] = "openapi"
    return _document(request, documents.swagger(tuple(_components(request).provider.served_groups())))


async def openapi_v3(request: web.Request) -> web.Response:
    request[ROUTE] = "openapi"
    groups = tuple(_components(request).provider.served_groups())
    return _json(documents.v3_index(groups))


async def openapi_v3_group(request: web.Request) -> web.Response:
    request[ROUTE] = "openapi"
    group, version = request.match_info["group"], request.match_info["version"]
    served = documents.group_versions(tuple(_components(request).provider.served_groups()))
    if (group, version) not in served:
        # kube-apiserver skips a 404 from an aggregated server (a 500 would fill its log)
        raise NotFound(NO_SUCH_PATH)
    return _document(request, documents.openapi_v3(group, version))


async def openapi_other(request: web.Request) -> web.Response:
    request[ROUTE] = "openapi"
    raise NotFound(NO_SUCH_PATH)


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/apis", apis)
    r.add_get("/apis/", apis)
    r.add_get("/apis/{group}", group)
    resource_routes.add_routes(app)
    # [\s\S], not ".": a name may hold an encoded newline, and routes match the decoded path
    r.add_get(r"/apis/{group}/{version}{tail:(/[\s\S]*)?}", metrics_api)
    r.add_get(r"/explain/{tail:[\s\S]*}", explain)
    r.add_get("/healthz", health.livez)
    r.add_get("/livez", health.livez)
    r.add_get("/readyz", health.readyz)
    r.add_get("/metrics", self_metrics)
    r.add_get("/openapi/v2", openapi_v2)
    r.add_get("/openapi/v3", openapi_v3)
    r.add_get("/openapi/v3/apis/{group}/{version}", openapi_v3_group)
    r.add_get("/openapi/{tail:.*}", openapi_other)
