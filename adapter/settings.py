"""Command-line flags and ``GPUSCALE_ADAPTER_*`` environment variables → frozen ``Settings``.

prometheus-adapter's flags are accepted with their meaning, so a Deployment can switch images without changing its
arguments; its API-server flags that this adapter does not act on yet are accepted and reported once. Every flag has an
environment variable (``--prometheus-url`` → ``GPUSCALE_ADAPTER_PROMETHEUS_URL``); a flag wins over its variable.
"""

from __future__ import annotations

import argparse
import os
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapter.errors import ConfigError
from adapter.prometheus import PrometheusConfig

ENV_PREFIX = "GPUSCALE_ADAPTER_"

# prometheus-adapter and generic API-server flags taken for compatibility, not acted on here (authentication and
# authorization arrive with the front-proxy work; logging goes to stderr anyway).
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
    "tls-min-version",
    "tls-sni-cert-key",
    "http2-max-streams-per-connection",
    "permit-port-sharing",
    "permit-address-sharing",
    "authentication-kubeconfig",
    "authentication-skip-lookup",
    "authentication-token-webhook-cache-ttl",
    "authentication-tolerate-lookup-failure",
    "authorization-kubeconfig",
    "authorization-always-allow-paths",
    "authorization-webhook-cache-authorized-ttl",
    "authorization-webhook-cache-unauthorized-ttl",
    "client-ca-file",
    "requestheader-allowed-names",
    "requestheader-client-ca-file",
    "requestheader-extra-headers-prefix",
    "requestheader-group-headers",
    "requestheader-username-headers",
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
    cache_ttl: float = 1.0
    secure_port: int = 6443
    bind_address: str = "0.0.0.0"
    cert_dir: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    insecure_serve_http: bool = False
    lister_kubeconfig: Path | None = None
    verbosity: int = 0
    ignored_flags: tuple[str, ...] = ()


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Go's duration syntax (``90s``, ``1m30s``, ``500ms``; ``0``) in seconds."""
    text = text.strip()
    if text == "0":
        return 0.0
    if not text or _DURATION_PART.sub("", text):
        raise ValueError(f"{text!r} is not a duration like 30s, 1m30s or 500ms")
    return sum(float(n) * _UNITS[u] for n, u in _DURATION_PART.findall(text))


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "t", "true", "yes", "y", "on"):
        return True
    if lowered in ("0", "f", "false", "no", "n", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true or false)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuscale-adapter",
        description="Serve custom.metrics.k8s.io and external.metrics.k8s.io from Prometheus.",
        allow_abbrev=False,
        exit_on_error=False,
        argument_default=None,
    )
    add = p.add_argument
    add("--prometheus-url", help="Prometheus base URL (default http://localhost:9090)")
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
    add("--config-check-interval", help="how often to look for changes to --config, 100ms to 1h (default 5s)")
    add("--metrics-relist-interval", help="how often to relist series names, 1s to 24h (default 1m)")
    add("--metrics-max-age", help="how far back a relist looks; at least the relist interval (default: the interval)")
    add("--metrics-cache-ttl", help="how long a query result is reused, 0s to 10m (default 1s)")
    add("--secure-port", help="port to serve on, 0 to 65535; 0 picks a free one (default 6443)")
    add("--bind-address", help="address to listen on (default 0.0.0.0)")
    add("--cert-dir", help="directory for apiserver.crt/apiserver.key; a self-signed pair is made there if absent")
    add("--tls-cert-file", help="serving certificate (with --tls-private-key-file)")
    add("--tls-private-key-file", help="serving certificate's key")
    add("--insecure-serve-http", nargs="?", const="true", help="serve plain HTTP instead of HTTPS (local runs)")
    add("--lister-kubeconfig", help="kubeconfig for listing pods, namespaces, nodes (default: in-cluster, if any)")
    add("-v", "--v", dest="v", help="log verbosity, 0 to 10; 4 and above logs debug lines (default 0)")
    for flag in IGNORED_FLAGS:
        add(f"--{flag}", nargs="?", const="", dest=f"ignored_{_dest(flag)}", help=argparse.SUPPRESS)
    return p


def _dest(flag: str) -> str:
    return flag.replace("-", "_")


def _env(flag: str) -> str:
    return ENV_PREFIX + _dest(flag).upper()


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

    def get(flag: str, default: str | None = None) -> str | None:
        value = values.get(_dest(flag))
        if value is None:
            value = env.get(_env(flag))
        return default if value is None else str(value)

    def fail(flag: str, problem: str) -> ConfigError:
        return ConfigError(f"--{flag} (or {_env(flag)}): {problem}")

    def duration(flag: str, default: str, low: float, high: float, shown: str) -> float:
        text = get(flag, default) or default
        try:
            seconds = parse_duration(text)
        except ValueError as e:
            raise fail(flag, str(e)) from e
        if not low <= seconds <= high:
            raise fail(flag, f"{text} is outside the valid range {shown}")
        return seconds

    def boolean(flag: str) -> bool:
        text = get(flag, "false") or "false"
        try:
            return parse_bool(text)
        except ValueError as e:
            raise fail(flag, str(e)) from e

    def path(flag: str) -> Path | None:
        text = get(flag)
        return Path(text) if text else None

    url = get("prometheus-url", "http://localhost:9090") or ""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise fail("prometheus-url", f"{url!r} is not an http:// or https:// URL")
    verb = (get("prometheus-verb", "GET") or "").upper()
    if verb not in ("GET", "POST"):
        raise fail("prometheus-verb", f"{verb!r} is not one of GET, POST")
    headers = []
    header_values = values.get("prometheus_header") or (
        [h for h in env.get(_env("prometheus-header"), "").splitlines() if h.strip()]
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
    ignored = tuple(f"--{f}" for f in IGNORED_FLAGS if values.get(f"ignored_{_dest(f)}") is not None)
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
        cache_ttl=duration("metrics-cache-ttl", "1s", 0, 600, "0s to 10m"),
        secure_port=port,
        bind_address=get("bind-address", "0.0.0.0") or "0.0.0.0",
        cert_dir=path("cert-dir"),
        tls_cert_file=tls_cert,
        tls_key_file=tls_key,
        insecure_serve_http=boolean("insecure-serve-http"),
        lister_kubeconfig=path("lister-kubeconfig"),
        verbosity=verbosity,
        ignored_flags=ignored,
    )


def usage() -> str:
    return _parser().format_help()
