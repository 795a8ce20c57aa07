"""HTTP endpoints: /metrics (the last published snapshot), /health, and an index page."""

from __future__ import annotations

import time
from collections.abc import Iterable

from aiohttp import web
from aiohttp.typedefs import Middleware

from collector.collection import Collection
from collector.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, wants_openmetrics

COLLECTION = web.AppKey("collection", Collection)


async def metrics(request: web.Request) -> web.Response:
    collection = request.app[COLLECTION]
    collection.scrapes.seen(time.monotonic())
    exposition = collection.latest
    if wants_openmetrics(request.headers.get("Accept", "")):
        return web.Response(body=exposition.openmetrics(), headers={"Content-Type": OPENMETRICS_CONTENT_TYPE})
    return web.Response(body=exposition.text(), headers={"Content-Type": TEXT_CONTENT_TYPE})


async def health(request: web.Request) -> web.Response:
    """200 while NVML is read and no background source has been failing past its bound (the pod watch, the counters
    ConfigMap, pod-resources...); else 503. The first line is NVML's state, then one line per stale source."""
    collection = request.app[COLLECTION]
    state, problems = collection.health, collection.background.problems()
    return web.Response(
        status=200 if state.ok and not problems else 503, text="\n".join([state.reason, *problems]) + "\n"
    )


async def index(request: web.Request) -> web.Response:
    return web.Response(
        text="GPU metrics collector: /metrics (Prometheus text or OpenMetrics), /health\n",
    )


def create_app(collection: Collection, middlewares: Iterable[Middleware] = ()) -> web.Application:
    """``middlewares``: what every request passes through first (the web configuration file's TLS client names, rate
    limit, headers and basic auth)."""
    app = web.Application(middlewares=middlewares)
    app[COLLECTION] = collection
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    app.router.add_get("/", index)
    return app
