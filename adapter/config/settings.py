"""Command-line flags and ``GPUSCALE_ADAPTER_*`` environment variables → frozen ``Settings``.

prometheus-adapter's flags are accepted with their meaning, so a Deployment can switch images without changing its
arguments; so are the authentication and authorization flags of Kubernetes' generic API servers. Flags this adapter
does not act on are accepted and reported once. Every flag has an environment variable (``--prometheus-url`` →
``GPUSCALE_ADAPTER_PROMETHEUS_URL``); a flag wins over its variable.
"""

from __future__ import annotations

import argparse
import os
import ssl
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapter.backends.prometheus import PrometheusConfig
from adapter.config.flags import ENV_PREFIX, FlagValues, dest, env_name, parse_bool, parse_duration
from adapter.errors import ConfigError
from adapter.security.auth_config import AUTH_FLAGS, CONFIGMAP, LIST_FLAGS, AuthSettings, auth_settings

__all__ = ["ENV_PREFIX", "IGNORED_FLAGS", "Settings", "parse_bool", "parse_duration", "parse_settings", "usage"]

# prometheus-adapter and generic API-server flags taken for compatibility, not acted on here (logging goes to stderr
# anyway; lookup failures are never tolerated: without its authentication configuration the adapter serves no metrics).
IGNORED_FLAGS = (
    "logtostderr",
    "alsologtostderr",
    "log-dir",
    "log-file",
    "log-file-max-size",
    "log-flush-frequency",
    "logging-format",
    "vmodule",
    "tls-cipher-suites",
    "tls-sni-cert-key",
    "http2-max-streams-per-connection",
    "permit-port-sharing",
    "permit-address-sharing",
    "authentication-tolerate-lookup-failure",
    "audit-log-path",
    "audit-log-maxage",
    "audit-log-maxbackup",
    "audit-log-maxsize",
    "audit-log-format",
    "audit-policy-file",
    "audit-webhook-config-file",
    "profiling",
    "contention-profiling",
    "discovery-interval",
    "feature-gates",
    "enable-priority-and-fairness",
)


@dataclass(frozen=True)
class Settings:
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    prometheus_auth_incluster: bool = False
    prometheus_auth_config: Path | None = None
    config: Path | None = None
    config_check_interval: float = 5.0
    relist_interval: float = 60.0
    max_age: float = 60.0
    cache_ttl: float = 0.25
    secure_port: int = 6443
    bind_address: str = "0.0.0.0"
    cert_dir: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    insecure_serve_http: bool = False
    insecure_disable_auth: bool = False
    auth: AuthSettings = field(default_factory=AuthSettings)
    lister_kubeconfig: Path | None = None
    verbosity: int = 0
    ignored_flags: tuple[str, ...] = ()


_TLS_VERSIONS = {"VersionTLS12": ssl.TLSVersion.TLSv1_2, "VersionTLS13": ssl.TLSVersion.TLSv1_3}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuscale-adapter",
        description="Serve custom.metrics.k8s.io and external.metrics.k8s.io from Prometheus.",
        allow_abbrev=False,
        exit_on_error=False,
        argument_default=None,
    )
    add = p.add_argument
    add("--prometheus-url", help="Prometheus base URL, required (for example http://prometheus.monitoring.svc:9090)")
    add("--prometheus-verb", help="GET or POST for queries; long queries use POST anyway (default GET)")
    add("--prometheus-timeout", help="deadline of one Prometheus query, 100ms to 5m (default 10s)")
    add("--prometheus-token-file", help="file with a bearer token for Prometheus, re-read when it changes")
    add("--prometheus-ca-file", help="CA bundle that signed Prometheus's serving certificate")
    add("--prometheus-client-tls-cert-file", help="client certificate for Prometheus (with its key file)")
    add("--prometheus-client-tls-key-file", help="key of the client certificate for Prometheus")
    add("--prometheus-header", action="append", help="extra request header Key=Value; repeatable")
    add("--prometheus-auth-incluster", nargs="?", const="true", help="use the pod's service-account token and CA")
    add("--prometheus-auth-config", help="kubeconfig file whose user credentials and CA are used for Prometheus")
    add("--config", help="prometheus-adapter rules file (default: the built-in GPU rules); reloaded on change")
    add("--config-check-interval", help="how often --config and certificate files are checked for changes (default 5s)")
    add("--metrics-relist-interval", help="how often to relist series names, 1s to 24h (default 1m)")
    add("--metrics-max-age", help="how far back a relist looks; at least the relist interval (default: the interval)")
    add("--metrics-cache-ttl", help="how long a query result is reused, 0s to 10m (default 250ms)")
    add("--secure-port", help="port to serve on, 0 to 65535; 0 picks a free one (default 6443)")
    add("--bind-address", help="address to listen on (default 0.0.0.0)")
    add("--cert-dir", help="directory for apiserver.crt/apiserver.key; a self-signed pair is made there if absent")
    add("--tls-cert-file", help="serving certificate (with --tls-private-key-file)")
    add("--tls-private-key-file", help="serving certificate's key")
    add("--tls-min-version", help="oldest TLS version accepted: VersionTLS12 or VersionTLS13 (default VersionTLS12)")
    add(
        "--insecure-serve-http",
        nargs="?",
        const="true",
        help="serve plain HTTP (local runs; needs --insecure-disable-auth)",
    )
    add(
        "--insecure-disable-auth",
        nargs="?",
        const="true",
        help="serve every caller without authentication or authorization",
    )
    add("--authentication-kubeconfig", help="kubeconfig for the ConfigMap and TokenReviews (default: in-cluster)")
    add("--authorization-kubeconfig", help="kubeconfig for SubjectAccessReviews (default: in-cluster)")
    add("--authentication-skip-lookup", nargs="?", const="true", help=f"do not read the {CONFIGMAP}")
    add(
        "--authentication-token-webhook-cache-ttl",
        help="how long TokenReview answers are reused, 0s to 1h (default 10s)",
    )
    add(
        "--authorization-webhook-cache-authorized-ttl",
        help="how long allowed reviews are reused, 0s to 1h (default 10s)",
    )
    add(
        "--authorization-webhook-cache-unauthorized-ttl",
        help="how long denied reviews are reused, 0s to 1h (default 10s)",
    )
    add("--client-ca-file", help=f"CA bundle for client certificates (default: from the {CONFIGMAP})")
    add("--requestheader-client-ca-file", help=f"CA bundle for the front proxy (default: from the {CONFIGMAP})")
    for flag in LIST_FLAGS:
        add(f"--{flag}", action="append", help="comma-separated list, repeatable")
    add("--lister-kubeconfig", help="kubeconfig for listing pods, namespaces, nodes (default: in-cluster, if any)")
    add("-v", "--v", dest="v", help="log verbosity, 0 to 10; 4 and above logs debug lines (default 0)")
    for flag in IGNORED_FLAGS:
        add(f"--{flag}", nargs="?", const="", dest=f"ignored_{dest(flag)}", help=argparse.SUPPRESS)
    return p


def parse_settings(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Settings:
    """Flags (winning) and environment into checked settings; ``ConfigError`` names the flag and the valid range."""
    env = os.environ if env is None else env
    try:
        ns, rest = _parser().parse_known_args(list(argv))
    except argparse.ArgumentError as e:
        raise ConfigError(str(e)) from e
    if rest:
        raise ConfigError(f"unknown flag or argument: {rest[0]}")
    values: dict[str, Any] = vars(ns)
    flags = FlagValues(values, env)
    get, fail, duration, boolean, path = flags.get, flags.fail, flags.duration, flags.boolean, flags.path

    url = get("prometheus-url", None) or ""
    if not url:
        # a default would be wrong in every cluster, and an adapter with no Prometheus only fails at the first request
        raise fail("prometheus-url", "is required: the base URL of the Prometheus that scrapes the collectors")
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise fail("prometheus-url", f"{url!r} is not an http:// or https:// URL")
    verb = (get("prometheus-verb", "GET") or "").upper()
    if verb not in ("GET", "POST"):
        raise fail("prometheus-verb", f"{verb!r} is not one of GET, POST")
    headers = []
    header_values = values.get("prometheus_header") or (
        [h for h in env.get(env_name("prometheus-header"), "").splitlines() if h.strip()]
    )
    for header in header_values:
        key, sep, value = header.partition("=")
        if not sep or not key.strip():
            raise fail("prometheus-header", f"{header!r} is not Key=Value")
        headers.append((key.strip(), value.strip()))
    cert, key = path("prometheus-client-tls-cert-file"), path("prometheus-client-tls-key-file")
    if (cert is None) != (key is None):
        raise fail("prometheus-client-tls-cert-file", "needs --prometheus-client-tls-key-file too, and the reverse")
    incluster, auth_config = boolean("prometheus-auth-incluster"), path("prometheus-auth-config")
    if incluster and auth_config:
        raise fail("prometheus-auth-config", "cannot be used with --prometheus-auth-incluster")
    timeout = duration("prometheus-timeout", "10s", 0.1, 300, "100ms to 5m")
    relist = duration("metrics-relist-interval", "1m", 1, 86400, "1s to 24h")
    max_age_text = get("metrics-max-age")
    max_age = (
        duration("metrics-max-age", max_age_text, relist, 30 * 86400, "the relist interval to 720h")
        if max_age_text
        else relist
    )
    try:
        port = int(get("secure-port", "6443") or "")
    except ValueError as e:
        raise fail("secure-port", "not an integer") from e
    if not 0 <= port <= 65535:
        raise fail("secure-port", f"{port} is outside the valid range 0 to 65535")
    tls_cert, tls_key = path("tls-cert-file"), path("tls-private-key-file")
    if (tls_cert is None) != (tls_key is None):
        raise fail("tls-cert-file", "needs --tls-private-key-file too, and the reverse")
    try:
        verbosity = int(get("v", "0") or "0")
    except ValueError as e:
        raise fail("v", "not an integer") from e
    if not 0 <= verbosity <= 10:
        raise fail("v", f"{verbosity} is outside the valid range 0 to 10")
    ignored = tuple(f"--{f}" for f in IGNORED_FLAGS if values.get(f"ignored_{dest(f)}") is not None)
    tls_min = get("tls-min-version", "VersionTLS12") or "VersionTLS12"
    if tls_min not in _TLS_VERSIONS:
        raise fail("tls-min-version", f"{tls_min!r} is not one of {', '.join(_TLS_VERSIONS)}")
    serve_http, disable_auth = boolean("insecure-serve-http"), boolean("insecure-disable-auth")
    if serve_http and not disable_auth:
        raise fail(
            "insecure-serve-http",
            "plain HTTP carries no client certificates, so callers cannot be authenticated as the aggregation "
            "layer authenticates them; add --insecure-disable-auth to serve every caller (local runs only)",
        )
    if disable_auth:
        contradicting = [f for f in AUTH_FLAGS if flags.given(f)]
        if contradicting:
            raise fail("insecure-disable-auth", f"turns authentication off, yet --{contradicting[0]} is given")
    return Settings(
        prometheus=PrometheusConfig(
            url=url,
            verb=verb,
            timeout=timeout,
            discovery_timeout=max(timeout, 30.0),
            token_file=path("prometheus-token-file"),
            ca_file=path("prometheus-ca-file"),
            client_cert_file=cert,
            client_key_file=key,
            headers=tuple(headers),
        ),
        prometheus_auth_incluster=incluster,
        prometheus_auth_config=auth_config,
        config=path("config"),
        config_check_interval=duration("config-check-interval", "5s", 0.1, 3600, "100ms to 1h"),
        relist_interval=relist,
        max_age=max_age,
        cache_ttl=duration("metrics-cache-ttl", "250ms", 0, 600, "0s to 10m"),
        secure_port=port,
        bind_address=get("bind-address", "0.0.0.0") or "0.0.0.0",
        cert_dir=path("cert-dir"),
        tls_cert_file=tls_cert,
        tls_key_file=tls_key,
        tls_min_version=_TLS_VERSIONS[tls_min],
        insecure_serve_http=serve_http,
        insecure_disable_auth=disable_auth,
        auth=auth_settings(flags),
        lister_kubeconfig=path("lister-kubeconfig"),
        verbosity=verbosity,
        ignored_flags=ignored,
    )


def usage() -> str:
    return _parser().format_help()
