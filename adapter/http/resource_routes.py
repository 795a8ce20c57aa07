"""The routes of metrics.k8s.io, at each of its versions (``VERSIONS``: v1 and v1beta1, one set of routes whose
``{version}`` is one of them), registered before the custom and external metrics' routes.

``nodes``, ``nodes/{name}``, ``pods`` (every namespace), ``namespaces/{ns}/pods`` and ``namespaces/{ns}/pods/{name}``,
lists with ``labelSelector`` and ``fieldSelector``, as metrics-server serves them. Every path of the group answers 404
unless the rules file has ``resourceRules``. Authentication and authorization are the app's middlewares, as for the
other groups: a list of pods is ``list`` on ``pods`` of group metrics.k8s.io, one pod ``get``.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from adapter.api import resource_objects as objects
from adapter.api import resource_tables as tables
from adapter.api.paths import NO_SUCH_PATH, RESOURCE_GROUP, VERSIONS
from adapter.components import COMPONENTS
from adapter.errors import NotFound
from adapter.provider.resource_metrics import ResourceMetrics
from adapter.query.field_selectors import FieldSelector, parse_field_selector
from adapter.query.list_options import refuse_watch
from adapter.query.selectors import Selector, parse_selector

PREFIX = f"/apis/{RESOURCE_GROUP}/{{version:{'|'.join(VERSIONS[RESOURCE_GROUP])}}}"


def _json(body: Any) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(), content_type="application/json"
    )


def _provider(request: web.Request) -> ResourceMetrics:
    return request.app[COMPONENTS].resource_metrics


def _selectors(request: web.Request) -> tuple[Selector, FieldSelector]:
    """A list's selectors; a request for one object ignores them, as the API server's GET does."""
    if "name" in request.match_info:
        return Selector(), FieldSelector()
    query = request.query
    return (
        parse_selector(query.get("labelSelector", ""), "labelSelector"),
        parse_field_selector(query.get("fieldSelector", "")),
    )


async def resource_list(request: web.Request) -> web.Response:
    _provider(request).rules()
    return _json(objects.resource_list(request.match_info["version"]))


async def nodes(request: web.Request) -> web.Response:
    provider = _provider(request)
    window = provider.rules().window
    name = request.match_info.get("name")
    version = request.match_info["version"]
    if name is None:
        refuse_watch(request.query, f"nodes.{RESOURCE_GROUP}")
    table = tables.table_version(request.headers.get("Accept", ""))
    include = tables.include_object(request.query) if table else ""
    found = await provider.nodes(*_selectors(request), name)
    if table is not None:
        return _json(tables.nodes_table(found, window, version, table, include))
    if name is not None:
        return _json(objects.one_node(found[0], window, version))
    return _json(objects.node_metrics_list(found, window, version))


async def pods(request: web.Request) -> web.Response:
    provider = _provider(request)
    window = provider.rules().window
    name = request.match_info.get("name")
    version = request.match_info["version"]
    if name is None:
        refuse_watch(request.query, f"pods.{RESOURCE_GROUP}")
    table = tables.table_version(request.headers.get("Accept", ""))
    include = tables.include_object(request.query) if table else ""
    found = await provider.pods(request.match_info.get("namespace"), *_selectors(request), name)
    if table is not None:
        return _json(tables.pods_table(found, window, version, table, include))
    if name is not None:
        return _json(objects.one_pod(found[0], window, version))
    return _json(objects.pod_metrics_list(found, window, version))


async def no_such_path(request: web.Request) -> web.Response:
    raise NotFound(NO_SUCH_PATH)


def add_routes(app: web.Application) -> None:
    """The group's routes; register them before ``/apis/{group}/{version}...`` so that they take its paths."""
    r = app.router
    r.add_get(PREFIX, resource_list)
    r.add_get(f"{PREFIX}/", resource_list)
    r.add_get(f"{PREFIX}/nodes", nodes)
    r.add_get(f"{PREFIX}/nodes/{{name}}", nodes)
    r.add_get(f"{PREFIX}/pods", pods)
    r.add_get(f"{PREFIX}/namespaces/{{namespace}}/pods", pods)
    r.add_get(f"{PREFIX}/namespaces/{{namespace}}/pods/{{name}}", pods)
    r.add_get(rf"/apis/{RESOURCE_GROUP}/{{tail:[\s\S]+}}", no_such_path)
