"""Command-line flags and ``GPUSCALE_ADAPTER_*`` environment variables → frozen ``Settings``.

prometheus-adapter's flags are accepted with their meaning, so a Deployment can switch images without changing its
arguments; so are the authentication and authorization flags of Kubernetes' generic API servers. Flags this adapter
does not act on are accepted and reported once. Every flag has an environment variable (``--prometheus-url`` →
``GPUSCALE_ADAPTER_PROMETHEUS_URL``); a flag wins over its variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from adapter.backends.backend_specs import BackendSpec
from adapter.backends.prometheus import PrometheusConfig
from adapter.errors import ConfigError
from adapter.flags import FLAGS, default
from adapter.keda.settings import KedaSettings
from adapter.security.auth_config import AuthSettings
from adapter.security.tls import TLSSettings
from common.flags import FlagError, boolean, parse_duration

__all__ = ["Settings", "parse_bool", "parse_duration", "parse_settings", "usage"]
parse_bool = boolean


@dataclass(frozen=True)
class Settings:
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    backends: tuple[BackendSpec, ...] = default("prometheus-backend")  # the named ones beside --prometheus-url's
    prometheus_auth_incluster: bool = default("prometheus-auth-incluster")
    prometheus_auth_config: Path | None = default("prometheus-auth-config")
    config: Path | None = default("config")
    config_check_interval: float = default("config-check-interval")
    relist_interval: float = default("metrics-relist-interval")
    max_age: float = default("metrics-relist-interval")  # --metrics-max-age defaults to the relist interval
    cache_ttl: float = default("metrics-cache-ttl")
    backend_failure_hold: float = default("backend-failure-hold")
    discovery_interval: float = default("discovery-interval")
    secure_port: int = default("secure-port")
    bind_address: str = default("bind-address")
    shutdown_delay: float = default("shutdown-delay-duration")
    tls: TLSSettings = field(default_factory=TLSSettings)
    insecure_serve_http: bool = default("insecure-serve-http")
    insecure_disable_auth: bool = default("insecure-disable-auth")
    auth: AuthSettings = field(default_factory=AuthSettings)
    lister_kubeconfig: Path | None = default("lister-kubeconfig")
    keda: KedaSettings = field(default_factory=KedaSettings)
    verbosity: int = default("v")
    ignored_flags: tuple[str, ...] = ()


def parse_settings(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Settings:
    """Flags (winning) and environment into checked settings; ``ConfigError`` names the flag and the valid range."""
    try:
        return _settings(argv, os.environ if env is None else env)
    except FlagError as e:
        raise ConfigError(str(e)) from e


def _settings(argv: Sequence[str], env: Mapping[str, str]) -> Settings:
    values = FLAGS.read(argv, env)
    fail = values.fail
    prometheus = values.fields("prometheus")
    if prometheus["url"] is None:
        # a default would be wrong in every cluster, and an adapter with no Prometheus only fails at the first request
        raise fail("prometheus-url", "is required: the base URL of the Prometheus that scrapes the collectors")
    if (prometheus["client_cert_file"] is None) != (prometheus["client_key_file"] is None):
        raise fail("prometheus-client-tls-cert-file", "needs --prometheus-client-tls-key-file too, and the reverse")
    if values["prometheus-auth-incluster"] and values["prometheus-auth-config"]:
        raise fail("prometheus-auth-config", "cannot be used with --prometheus-auth-incluster")
    relist, max_age = values["metrics-relist-interval"], values["metrics-max-age"]
    if max_age is not None and max_age < relist:
        raise fail("metrics-max-age", f"{max_age:g}s is outside the valid range the relist interval to 720h")
    if (values["tls-cert-file"] is None) != (values["tls-private-key-file"] is None):
        raise fail("tls-cert-file", "needs --tls-private-key-file too, and the reverse")
    if values["insecure-serve-http"] and not values["insecure-disable-auth"]:
        raise fail(
            "insecure-serve-http",
            "plain HTTP carries no client certificates, so callers cannot be authenticated as the aggregation "
            "layer authenticates them; add --insecure-disable-auth to serve every caller (local runs only)",
        )
    if values["keda-client-ca-file"] is not None:
        if values["keda-scaler-address"] is None:
            raise fail(
                "keda-client-ca-file", "needs --keda-scaler-address: there is no KEDA scaler to check callers of"
            )
        if values["insecure-serve-http"]:
            raise fail(
                "keda-client-ca-file",
                "client certificates need TLS, and --insecure-serve-http serves KEDA's scaler in plain text too",
            )
    if values["keda-client-allowed-names"] and values["keda-client-ca-file"] is None:
        raise fail(
            "keda-client-allowed-names",
            "needs --keda-client-ca-file: without it callers present no certificate whose names could be checked",
        )
    if values["insecure-disable-auth"]:
        # what --insecure-disable-auth turns off: giving any of these with it is a contradiction, not a no-op
        contradicting = [f for f, flag in FLAGS.flags.items() if (flag.field or "").startswith("auth.")]
        given = [f for f in contradicting if f in values.given]
        if given:
            raise fail("insecure-disable-auth", f"turns authentication off, yet --{given[0]} is given")
    return Settings(
        prometheus=PrometheusConfig(**prometheus, discovery_timeout=max(prometheus["timeout"], 30.0)),
        auth=AuthSettings(**values.fields("auth")),
        tls=TLSSettings(**values.fields("tls")),
        keda=KedaSettings(**values.fields("keda")),
        max_age=relist if max_age is None else max_age,
        ignored_flags=values.ignored,
        **values.fields(),
    )


def usage() -> str:
    return FLAGS.usage()
