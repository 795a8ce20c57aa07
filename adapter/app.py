"""The app factory: ``create_app(settings)`` wires the components; ``cleanup_ctx`` owns sessions and background tasks
(each run by ``common/supervisor.py``, so none stops unseen).

Middlewares run outermost first: ``observe`` (latency, errors → Status) wraps everything, then
``scaler_questions`` (``/explain/keda/...`` becomes the HTTP question it asks, which the guard then reviews), then
``auth.guard`` (authentication and authorization, unless ``--insecure-disable-auth``), so refusals are measured and
rendered as Status objects like any other error; middlewares passed to ``create_app`` run inside both.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

from adapter.backends.auth_api import AuthAPI
from adapter.backends.kube_api import KubeMetadataAPI
from adapter.components import COMPONENTS, components
from adapter.http import handlers, scaler_questions
from adapter.http.health import STOPPING
from adapter.keda.credentials import ScalerCertificates
from adapter.keda.scaler import Scaler
from adapter.keda.server import ScalerServer
from adapter.naming.resources import RestMapping
from adapter.security import auth, tls
from adapter.security.tls import ServingTLS
from adapter.self_metrics import AdapterMetrics
from adapter.settings import Settings
from common.freshness import DEFAULT_TIMING, Timing
from common.listener import Limits
from common.supervisor import polled, start, stop

SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", AdapterMetrics)
KUBE_API = web.AppKey("kube_api", KubeMetadataAPI)
AUTH_API = web.AppKey("auth_api", AuthAPI)
SERVING = web.AppKey("serving", ServingTLS)
TIMING = web.AppKey("timing", Timing)
KEDA = web.AppKey("keda", ScalerServer)
CLOCK: web.AppKey[Callable[[], float]] = web.AppKey("clock")
LIMITS = web.AppKey("limits", Limits)


async def _components_ctx(app: web.Application) -> AsyncIterator[None]:
    async with components(app[SETTINGS], app[METRICS], app.get(KUBE_API), timing=app[TIMING], clock=app[CLOCK]) as c:
        app[COMPONENTS] = c
        tasks = await c.start()
        yield
        await stop(tasks)


async def _security_ctx(app: web.Application) -> AsyncIterator[None]:
    settings, metrics, timing = app[SETTINGS], app[METRICS], app[TIMING]
    async with auth.security(
        settings.auth, settings.config_check_interval, metrics, app.get(AUTH_API), app.get(SERVING), timing
    ) as security:
        app[auth.SECURITY] = security
        tasks = start(security.background(), metrics, timing)
        yield
        await stop(tasks)


async def _serving_ctx(app: web.Application) -> AsyncIterator[None]:
    serving, metrics, timing = app[SERVING], app[METRICS], app[TIMING]
    interval = app[SETTINGS].config_check_interval
    certificate = polled("serving-certificate", interval, lambda: serving.check(metrics), metrics, timing)
    tasks = start([certificate], metrics, timing)
    yield
    await stop(tasks)


async def _keda_ctx(app: web.Application) -> AsyncIterator[None]:
    """KEDA's external scaler on --keda-scaler-address, answered by the components' provider; with the serving
    certificate unless --insecure-serve-http, and the HTTP port's connection limits."""
    settings, metrics, timing = app[SETTINGS], app[METRICS], app[TIMING]
    keda = settings.keda
    assert keda.address is not None
    certificates = None
    if not settings.insecure_serve_http:
        serving = app.get(SERVING) or tls.serving_tls(settings.tls, request_certs=False)
        certificates = ScalerCertificates(serving.cert, serving.key, keda.client_ca_file)
    scaler = Scaler(
        app[COMPONENTS].provider, metrics, keda.stream_interval, keda.max_streams, keda.max_streams_per_namespace
    )
    unused_ca = str(keda.client_ca_file) if certificates is None and keda.client_ca_file is not None else ""
    server = app[KEDA] = ScalerServer(
        keda.address, scaler, certificates, unused_ca, allowed_names=keda.client_allowed_names, limits=app[LIMITS]
    )
    await server.start()
    tasks = []
    if certificates is not None:
        interval = settings.config_check_interval
        files = polled("serving-certificate/keda", interval, certificates.reload_if_changed, metrics, timing)
        tasks = start([files], metrics, timing)
    yield
    await stop(tasks)
    await server.stop()


def _mapping(app: web.Application) -> RestMapping | None:
    """The REST mapping the answers resolve resources with, once the components are up."""
    c = app.get(COMPONENTS)
    return c.rest_mapper.mapping if c is not None else None


def create_app(
    settings: Settings,
    *,
    metrics: AdapterMetrics | None = None,
    kube_api: KubeMetadataAPI | None = None,
    auth_api: AuthAPI | None = None,
    serving: ServingTLS | None = None,
    middlewares: Sequence[Middleware] = (),
    timing: Timing = DEFAULT_TIMING,
    clock: Callable[[], float] = time.monotonic,
    limits: Limits | None = None,
) -> web.Application:
    """The adapter as an aiohttp app.

    ``kube_api`` and ``auth_api`` replace the Kubernetes API clients built from settings; ``serving`` is the TLS
    context the server runs with, whose client CAs follow the authentication configuration and whose certificate is
    reloaded when its files change; ``timing``: how long a background source may fail before ``/readyz`` does, and
    the longest wait between retries; ``clock``: what the ages of held answers (``--backend-failure-hold``) are read
    from; ``limits``: the connection limits of the HTTP port, which KEDA's port takes too.
    """
    guard = [] if settings.insecure_disable_auth else [auth.guard(settings.auth.always_allow_paths, _mapping)]
    app = web.Application(middlewares=[handlers.observe, scaler_questions.as_http_question, *guard, *middlewares])
    app[SETTINGS] = settings
    app[METRICS] = metrics or AdapterMetrics()
    app[TIMING] = timing
    app[CLOCK] = clock
    app[LIMITS] = limits or Limits()
    app[STOPPING] = asyncio.Event()
    if kube_api is not None:
        app[KUBE_API] = kube_api
    if auth_api is not None:
        app[AUTH_API] = auth_api
    if serving is not None:
        app[SERVING] = serving
        app.cleanup_ctx.append(_serving_ctx)
    if not settings.insecure_disable_auth:
        app.cleanup_ctx.append(_security_ctx)
    app.cleanup_ctx.append(_components_ctx)
    if settings.keda.address is not None:
        app.cleanup_ctx.append(_keda_ctx)  # after the components, whose provider it asks, and stopped before them
    handlers.add_routes(app)
    return app
