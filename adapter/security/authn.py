"""Delegated authentication, in the order Kubernetes' generic API servers try their authenticators: the front
proxy's request headers, then a client certificate from the client CA (user = CN, groups = O), then a bearer token
(TokenReview). The first that names a user wins; ``system:authenticated`` is then added to the user's groups.

Anything else is 401, and why is logged at debug level only (a scanner would fill the log otherwise). A token review
that cannot be made is a 503 (``ReviewError``): the request is refused, never let through.
"""

from __future__ import annotations

import logging

from aiohttp import web

from adapter.errors import AuthNotReady, CertificateRejected, ReviewError, Unauthorized
from adapter.security.auth_config import AuthenticationConfig
from adapter.security.auth_source import AuthConfigSource
from adapter.security.client_certs import BundleVerifier
from adapter.security.front_proxy import FrontProxy
from adapter.security.identity import User
from adapter.security.token_review import TokenReviewer, bearer_token
from adapter.self_metrics import AdapterMetrics

log = logging.getLogger(__name__)


def peer_certificate(request: web.Request) -> bytes | None:
    """The client certificate (DER) the TLS handshake verified against the trusted CAs, if the client sent one."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    der: bytes | None = ssl_object.getpeercert(binary_form=True)
    return der


class _Verifiers:
    """The checkers of one configuration; rebuilt when it changes, which also drops their cached verdicts."""

    def __init__(self, config: AuthenticationConfig) -> None:
        self.config = config
        self.front_proxy = FrontProxy(config.request_header) if config.request_header else None
        self.client_ca = BundleVerifier(config.client_ca) if config.client_ca else None


class Authenticator:
    def __init__(self, source: AuthConfigSource, tokens: TokenReviewer, metrics: AdapterMetrics) -> None:
        self.source = source
        self.tokens = tokens
        self.metrics = metrics
        self._verifiers: _Verifiers | None = None

    def _current(self) -> _Verifiers:
        config = self.source.config
        if config is None:
            raise AuthNotReady(
                "the authentication configuration is not loaded yet; no request can be authenticated before it is"
            )
        if self._verifiers is None or self._verifiers.config is not config:
            self._verifiers = _Verifiers(config)
        return self._verifiers

    async def authenticate(self, request: web.Request) -> User:
        verifiers = self._current()
        der = peer_certificate(request)
        refusals: list[str] = []
        if der is not None:
            user = self._certificate(verifiers, der, request, refusals)
            if user is not None:
                return user.authenticated()
        token = bearer_token(request.headers.get("Authorization", ""))
        if token is not None:
            try:
                user, cached = await self.tokens.authenticate(token)
            except ReviewError:
                self.metrics.authentications.labels("token", "error").inc()
                raise
            if user is not None:
                self.metrics.authentications.labels("token", "success").inc()
                return user.authenticated()
            self.metrics.authentications.labels("token", "failure").inc()
            refusals.append("the bearer token is not valid" + (" (cached answer)" if cached else ""))
        if der is None and token is None:
            self.metrics.authentications.labels("none", "failure").inc()
            refusals.append("no client certificate and no bearer token")
        log.debug("%s %s: 401: %s", request.method, request.path, "; ".join(refusals))
        raise Unauthorized()

    def _certificate(self, verifiers: _Verifiers, der: bytes, request: web.Request, refusals: list[str]) -> User | None:
        if verifiers.front_proxy is not None:
            try:
                user = verifiers.front_proxy.authenticate(der, request.headers)
            except CertificateRejected as e:
                refusals.append(f"front proxy: {e}")
            else:
                if user is not None:
                    self.metrics.authentications.labels("front_proxy", "success").inc()
                    return user
                refusals.append("front proxy certificate without a username header")
        if verifiers.client_ca is not None:
            try:
                name = verifiers.client_ca.verify(der)
            except CertificateRejected as e:
                refusals.append(f"client certificate: {e}")
            else:
                if name.common_name:
                    self.metrics.authentications.labels("client_certificate", "success").inc()
                    return User(name.common_name, groups=name.organizations, method="client_certificate")
                refusals.append("client certificate without a common name")
        self.metrics.authentications.labels("client_certificate", "failure").inc()
        return None
