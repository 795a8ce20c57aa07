"""The engine's HTTP endpoints: ``/metrics`` from its registry (the text format, or OpenMetrics when the scraper asks
for it, as prometheus_client's own exporters answer, vLLM's included) and ``/health``, which vLLM also serves."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

REGISTRY = web.AppKey("registry", CollectorRegistry)


async def metrics(request: web.Request) -> web.Response:
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return web.Response(body=encode(request.app[REGISTRY]), headers={"Content-Type": content_type})


async def health(request: web.Request) -> web.Response:
    return web.Response(text="")


def create_app(registry: CollectorRegistry) -> web.Application:
    app = web.Application()
    app[REGISTRY] = registry
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    return app
