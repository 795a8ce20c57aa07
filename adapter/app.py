"""The app factory: ``create_app(settings)`` wires the components; ``cleanup_ctx`` owns sessions and background tasks.

Middlewares run outermost first: ``observe`` (latency, errors → Status) wraps everything, so a middleware added later
(authentication and authorization, in ``create_app(..., middlewares=[...])``) has its refusals measured and rendered
as Status objects like any other error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

from adapter import handlers
from adapter.components import COMPONENTS, components
from adapter.kube_api import KubeMetadataAPI
from adapter.self_metrics import AdapterMetrics
from adapter.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", AdapterMetrics)
KUBE_API = web.AppKey("kube_api", KubeMetadataAPI)


async def _components_ctx(app: web.Application) -> AsyncIterator[None]:
    async with components(app[SETTINGS], app[METRICS], app.get(KUBE_API)) as c:
        app[COMPONENTS] = c
        tasks = await c.start()
        yield
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def create_app(
    settings: Settings,
    *,
    metrics: AdapterMetrics | None = None,
    kube_api: KubeMetadataAPI | None = None,
    middlewares: Sequence[Middleware] = (),
) -> web.Application:
    """The adapter as an aiohttp app; ``kube_api`` replaces the Kubernetes API client built from settings."""
    app = web.Application(middlewares=[handlers.observe, *middlewares])
    app[SETTINGS] = settings
    app[METRICS] = metrics or AdapterMetrics()
    if kube_api is not None:
        app[KUBE_API] = kube_api
    app.cleanup_ctx.append(_components_ctx)
    handlers.add_routes(app)
    return app
