"""Authentication and authorization of every request, as an aiohttp middleware (``guard``), and their assembly.

The health endpoints and ``--authorization-always-allow-paths`` are open to everyone (probes carry no credentials);
every other request is authenticated (``authn.py``), then authorized by a SubjectAccessReview (``authz.py``). The
middleware runs inside ``handlers.observe``, so its refusals become Status objects and are measured like any error.
An open path may still ask who the caller is (``caller``): ``/readyz`` says why a check failed only to a caller that
authenticates. With ``--insecure-disable-auth`` none of this is installed, and the adapter says so at start and in
``/readyz``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from adapter.backends.auth_api import CONFIGMAP, AuthAPI, KubernetesAuthAPI
from adapter.errors import AdapterError, AuthNotReady, ConfigError, Forbidden, ReviewError
from adapter.naming.resources import RestMapping
from adapter.query.list_options import asks_watch
from adapter.security.auth_config import AuthenticationConfig, AuthSettings
from adapter.security.auth_source import AuthConfigSource
from adapter.security.authn import Authenticator, peer_certificate
from adapter.security.authz import Authorizer, forbidden_message
from adapter.security.flags import HEALTH_PATHS
from adapter.security.identity import User
from adapter.security.request_info import reviewed
from adapter.security.tls import ServingTLS
from adapter.security.token_review import TokenReviewer
from adapter.self_metrics import AdapterMetrics
from common.freshness import DEFAULT_TIMING, Timing
from common.supervisor import Work

log = logging.getLogger(__name__)

USER = web.RequestKey("user", User)
DISABLED_WARNING = (
    "authentication and authorization are DISABLED (--insecure-disable-auth): anyone who can reach the port reads "
    "every metric; use this for local runs only"
)


def is_open(path: str, always_allowed: tuple[str, ...]) -> bool:
    return any(path == p or (p.endswith("*") and path.startswith(p[:-1])) for p in (*HEALTH_PATHS, *always_allowed))


@dataclass
class Security:
    check_interval: float  # how often the CA files are checked for changes
    source: AuthConfigSource
    authenticator: Authenticator
    authorizer: Authorizer

    def background(self) -> list[Work]:
        return self.source.background(self.check_interval)

    def readiness(self) -> tuple[bool, str]:
        """Whether the configuration is loaded, and why not."""
        if self.source.loaded:
            return True, ""
        return False, f"{CONFIGMAP} not loaded yet" + (f" ({self.source.error})" if self.source.error else "")


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


@contextlib.asynccontextmanager
async def security(
    auth: AuthSettings,
    check_interval: float,
    metrics: AdapterMetrics,
    api: AuthAPI | None = None,
    serving: ServingTLS | None = None,
    timing: Timing = DEFAULT_TIMING,
) -> AsyncIterator[Security]:
    """Authentication and authorization as the flags ask; ``api`` replaces the Kubernetes API clients."""
    opened: list[AuthAPI] = []
    if api is None:
        for flag, kubeconfig in (
            ("--authentication-kubeconfig", auth.authentication_kubeconfig),
            ("--authorization-kubeconfig", auth.authorization_kubeconfig),
        ):
            if kubeconfig is None and not _in_cluster():
                raise ConfigError(
                    f"authentication and authorization need the Kubernetes API (TokenReview, SubjectAccessReview, "
                    f"the {CONFIGMAP}): give {flag} or run in a cluster; for a local run without any, "
                    "--insecure-disable-auth"
                )
    try:
        if api is None:
            for kubeconfig in (auth.authentication_kubeconfig, auth.authorization_kubeconfig):
                opened.append(await KubernetesAuthAPI.connect(kubeconfig))
        authn_api, authz_api = (api, api) if api is not None else (opened[0], opened[1])

        def trust(config: AuthenticationConfig) -> None:
            if serving is not None:
                serving.set_client_cas(config.trusted_pem())

        source = AuthConfigSource(auth, authn_api, metrics, on_change=trust, timing=timing)
        authenticator = Authenticator(source, TokenReviewer(authn_api, auth.token_cache_ttl), metrics)
        authorizer = Authorizer(authz_api, auth.authorized_ttl, auth.unauthorized_ttl)
        yield Security(check_interval, source, authenticator, authorizer)
    finally:
        for opened_api in opened:
            await opened_api.close()


SECURITY = web.AppKey("security", Security)


async def caller(request: web.Request) -> User | None:
    """Who asks for an open path, when its credentials authenticate; None without any, with ones that do not, or
    before authentication can work. Never refuses: the path is open either way."""
    sec = request.app.get(SECURITY)
    if sec is None or (peer_certificate(request) is None and "Authorization" not in request.headers):
        return None  # no credentials: nothing to count as a failed authentication
    try:
        return await sec.authenticator.authenticate(request)
    except AdapterError:
        return None


def guard(
    always_allowed: tuple[str, ...], mapping: Callable[[web.Application], RestMapping | None] = lambda app: None
) -> Middleware:
    """The middleware: open paths pass untouched; anything else is authenticated, then authorized as
    ``request_info.reviewed`` says, resources named through ``mapping`` (the REST mapping in force, None before it is
    read)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if is_open(request.path, always_allowed):
            return await handler(request)
        sec = request.app.get(SECURITY)
        if sec is None:
            raise AuthNotReady("authentication is starting")
        metrics = sec.authenticator.metrics
        user = await sec.authenticator.authenticate(request)
        watch = asks_watch(request.query)
        for attrs in reviewed(request.method, request.rel_url.raw_path, mapping(request.app), watch):
            try:
                decision = await sec.authorizer.authorize(user, attrs)
            except ReviewError:
                metrics.authorizations.labels("error", "review").inc()
                raise
            metrics.authorizations.labels("allowed" if decision.allowed else "denied", decision.source).inc()
            if not decision.allowed:
                log.debug("%s %s: 403 for %s (%s)", request.method, request.path, user.name, decision.reason or "-")
                raise Forbidden(forbidden_message(user, attrs, decision.reason))
        request[USER] = user
        return await handler(request)

    return check
