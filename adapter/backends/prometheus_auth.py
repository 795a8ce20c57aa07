"""Prometheus credentials from prometheus-adapter's two auth flags: ``--prometheus-auth-incluster`` (the pod's
service-account token and CA) or ``--prometheus-auth-config`` (a kubeconfig's current user and cluster CA).

The kubeconfig is read by the Kubernetes client library (``kubeconfig.py``): a token or token file, an exec plugin
(``aws eks get-token``, ``gke-gcloud-auth-plugin``...), client certificates, basic auth, an auth provider, the
cluster's CA, ``insecure-skip-tls-verify``, ``tls-server-name`` and ``proxy-url``; its ``server`` is not used (the
URL is ``--prometheus-url``), as in prometheus-adapter. It is read again every minute (a rotated token file, a
changed Secret), when an exec plugin's credential expires, and after Prometheus answers 401; a failed reading keeps
the credentials in use and is tried again. As in prometheus-adapter, ``--prometheus-token-file`` wins over the
kubeconfig's token; the kubeconfig's TLS settings are used unless ``--prometheus-ca-file`` or a client certificate
is given by flag.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapter.backends import kubeconfig
from adapter.backends.prometheus import Credential, PrometheusConfig
from adapter.errors import ConfigError

log = logging.getLogger(__name__)

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
REREAD_SECONDS = 60.0  # as client-go re-reads a token file
RETRY_SECONDS = 10.0
# an exec credential is renewed this long before it expires, as the client library renews it
EXPIRY_MARGIN_SECONDS = 10.0


def _ssl_context(configuration: Any) -> ssl.SSLContext | None:
    """The kubeconfig's TLS settings, built while its certificate files exist; None when it sets none."""
    if not (configuration.ssl_ca_cert or configuration.cert_file or not configuration.verify_ssl):
        return None
    ctx = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        ctx.load_cert_chain(configuration.cert_file, configuration.key_file)
    if not configuration.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class KubeconfigCredentials:
    """``Credentials`` for ``PrometheusClient`` from a kubeconfig, kept current (see the module's docstring)."""

    def __init__(self, path: Path, use_tls: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        """``use_tls``: take the kubeconfig's TLS settings (False when flags give them)."""
        self.path = path
        self.use_tls = use_tls
        self._clock = clock
        self._credential = Credential()
        self._renew_at = 0.0
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """The first reading; ``ConfigError`` names the file and what is wrong with it."""
        try:
            await self._read()
        except (kubeconfig.KubeconfigError, ssl.SSLError, OSError) as e:
            raise ConfigError(f"--prometheus-auth-config: {_reason(e, self.path)}") from e

    async def current(self) -> Credential:
        if self._clock() >= self._renew_at:
            async with self._lock:
                if self._clock() >= self._renew_at:
                    try:
                        await self._read()
                    except (kubeconfig.KubeconfigError, ssl.SSLError, OSError) as e:
                        log.warning(
                            "--prometheus-auth-config: %s; the credentials in use are kept, tried again in %gs",
                            _reason(e, self.path),
                            RETRY_SECONDS,
                        )
                        self._renew_at = self._clock() + RETRY_SECONDS
        return self._credential

    def rejected(self) -> None:
        self._renew_at = 0.0

    async def _read(self) -> None:
        async with kubeconfig.loaded(self.path) as (configuration, loader):
            tls = _ssl_context(configuration) if self.use_tls else None
        # "Bearer …" or "Basic …", as the loader made it; a token file's line end trimmed, as client-go trims it
        authorization = (configuration.api_key.get("BearerToken") or "").strip() or None
        if authorization is not None and ("\n" in authorization or "\r" in authorization):
            raise kubeconfig.KubeconfigError(f"kubeconfig {self.path}: its token holds a line break")
        credential = Credential(
            authorization=authorization,
            ssl=tls,
            server_hostname=configuration.tls_server_name if self.use_tls else None,
            proxy=configuration.proxy,
        )
        now = self._clock()
        renew = now + REREAD_SECONDS
        expiry = getattr(loader, "exec_plugin_expiry", None)  # set for an exec credential with expirationTimestamp
        if isinstance(expiry, datetime.datetime):
            left = (expiry - datetime.datetime.now(datetime.UTC)).total_seconds() - EXPIRY_MARGIN_SECONDS
            renew = min(renew, now + max(left, 1.0))
        self._credential, self._renew_at = credential, renew


def _reason(error: Exception, path: Path) -> str:
    if isinstance(error, ssl.SSLError):
        return f"kubeconfig {path}: its certificate or key does not load ({error.reason or error})"
    return str(error)


async def resolve(
    config: PrometheusConfig, incluster: bool = False, auth_config: Path | None = None
) -> tuple[PrometheusConfig, KubeconfigCredentials | None]:
    """The Prometheus connection, with the pod's service-account credentials when ``incluster``
    (--prometheus-auth-incluster), and the kubeconfig credentials when ``auth_config`` (--prometheus-auth-config) is
    given (read once here, so that a broken kubeconfig stops the start)."""
    if incluster:
        supplied: dict[str, Any] = {"token_file": SERVICE_ACCOUNT / "token", "ca_file": SERVICE_ACCOUNT / "ca.crt"}
        explicit = {k: v for k, v in supplied.items() if getattr(config, k) is None}
        return dataclasses.replace(config, **explicit), None
    if auth_config is None:
        return config, None
    flags_tls = config.ca_file is not None or config.client_cert_file is not None
    credentials = KubeconfigCredentials(auth_config, use_tls=not flags_tls)
    await credentials.start()
    return config, credentials
