"""The adapter's flags: one table of prometheus-adapter's flags, the generic Kubernetes API-server flags for
authentication and authorization, and this adapter's own, each with its ``GPUSCALE_ADAPTER_*`` variable, parser,
range and default. The settings dataclasses take their defaults from it."""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable
from typing import Any

from adapter.config.backends import backend_specs, header, optional_boolean, prometheus_url
from common.cipher_suites import openssl_names
from common.flags import (
    FlagTable,
    boolean,
    choice,
    duration,
    flag,
    integer,
    optional_path,
    optional_text,
    string_list,
)

# where kube-apiserver publishes the client CAs for extension API servers (DESIGN §3.4)
CONFIGMAP_NAMESPACE, CONFIGMAP_NAME = "kube-system", "extension-apiserver-authentication"
CONFIGMAP = f"ConfigMap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}"
# the paths Kubernetes API servers answer without authorization (--authorization-always-allow-paths)
HEALTH_PATHS = ("/healthz", "/readyz", "/livez")


def verb(text: str) -> str:
    return str(choice("GET", "POST")(text.upper()))


def headers(text: str) -> tuple[tuple[str, str], ...]:
    """``Key=Value`` per line (the flag repeated, or the variable's lines)."""
    return tuple(map(header, filter(str.strip, text.splitlines())))


_BYTE_UNITS = {"Gi": 1024**3, "Mi": 1024**2, "Ki": 1024, "": 1}


def byte_size(low: int, high: int) -> Callable[[str], int]:
    """Bytes as a whole number, or with Kubernetes' binary suffix Ki, Mi or Gi, from ``low`` to ``high``."""

    def parse(text: str) -> int:
        match = re.fullmatch(r"\s*(\d{1,15})(Ki|Mi|Gi)?\s*", text)
        if match is None:
            raise ValueError(f"{text!r} is not a number of bytes (a whole number, or one ending in Ki, Mi or Gi)")
        value = int(match[1]) * _BYTE_UNITS[match[2] or ""]
        if not low <= value <= high:
            raise ValueError(f"{text.strip()} is outside the valid range {show_bytes(low)} to {show_bytes(high)}")
        return value

    return parse


def show_bytes(value: int) -> str:
    """A number of bytes as a flag would say it: 33554432 → 32Mi."""
    unit = next(u for u, size in _BYTE_UNITS.items() if value % size == 0)
    return f"{value // _BYTE_UNITS[unit]}{unit}"


# Kubernetes' names; TLS 1.0 and 1.1 are offered only where the image's OpenSSL still allows them
_TLS_VERSIONS = {
    "VersionTLS10": ssl.TLSVersion.TLSv1,
    "VersionTLS11": ssl.TLSVersion.TLSv1_1,
    "VersionTLS12": ssl.TLSVersion.TLSv1_2,
    "VersionTLS13": ssl.TLSVersion.TLSv1_3,
}


def tls_version(text: str) -> ssl.TLSVersion:
    return _TLS_VERSIONS[choice(*_TLS_VERSIONS)(text)]


def allow_paths(text: str) -> tuple[str, ...]:
    paths = string_list(text)
    for p in paths:
        if not p.startswith("/") or "*" in p[:-1]:
            raise ValueError(f"{p!r} is not a path (a trailing * is allowed)")
    return paths


def cipher_suites(text: str) -> tuple[str, ...]:
    return openssl_names(string_list(text))


_TTL = duration(0, 3600, "0s to 1h")
_AUDIT_BACKEND = (
    "mode", "batch-buffer-size", "batch-max-size", "batch-max-wait", "batch-throttle-enable", "batch-throttle-qps",
    "batch-throttle-burst", "truncate-enabled", "truncate-max-batch-size", "truncate-max-event-size",
)  # fmt: skip
# Flags of prometheus-adapter (its own, klog's, custom-metrics-apiserver's and the generic API server's) that are
# accepted so that its Deployments start unchanged, but act on nothing here: why, as the start-up log says it.
# klog's flags are spelt with '_' (log_dir) by klog and with '-' by Kubernetes' docs: both are accepted.
_IGNORED = {
    "the adapter logs to stderr, a line per record written at once": (
        "logtostderr", "alsologtostderr", "log_dir", "log_file", "log_file_max_size", "log-flush-frequency",
        "logging-format", "stderrthreshold", "one_output", "skip_headers", "skip_log_headers", "add_dir_header",
        "log_backtrace_at",
    ),
    "--v sets the one log level; there are no per-file levels": ("vmodule",),
    "this adapter serves HTTP/1.1 only, so HTTP/2 is always off": (
        "disable-http2", "http2-max-streams-per-connection",
    ),
    "one serving certificate (--tls-cert-file or --cert-dir) answers every server name": ("tls-sni-cert-key",),
    "the port is opened as asyncio opens it: SO_REUSEADDR on, SO_REUSEPORT off": (
        "permit-port-sharing", "permit-address-sharing",
    ),
    f"until the {CONFIGMAP} is read, requests are refused (503) and it is read again, never skipped": (
        "authentication-tolerate-lookup-failure",
    ),
    "no audit log is written (--v=6 logs every request)": (
        "audit-policy-file", "audit-log-path", "audit-log-maxage", "audit-log-maxbackup", "audit-log-maxsize",
        "audit-log-format", "audit-log-version", "audit-log-compress", "audit-webhook-config-file",
        "audit-webhook-initial-backoff", "audit-webhook-batch-initial-backoff", "audit-webhook-version",
        *(f"audit-{backend}-{name}" for backend in ("log", "webhook") for name in _AUDIT_BACKEND),
    ),
    "there is no Go profiler (/debug/pprof) to serve": ("profiling", "contention-profiling", "debug-socket-path"),
    "requests are bounded by the connection limits of adapter/serving, not by API Priority and Fairness": (
        "enable-priority-and-fairness",
    ),
    "there are no Kubernetes feature gates here": ("feature-gates",),
    "the API server is not rate-limited on the client side: objects are watched and reviews cached": (
        "client-qps", "client-burst",
    ),
}  # fmt: skip


def _table() -> FlagTable:
    p, a = "prometheus.", "auth."
    flags = [
        flag("--prometheus-url", field=p + "url", parse=prometheus_url,
             help="Prometheus base URL, required (for example http://prometheus.monitoring.svc:9090)"),
        flag("--prometheus-verb", field=p + "verb", parse=verb, default="GET",
             help="GET or POST for queries; long queries use POST anyway"),
        flag("--prometheus-timeout", field=p + "timeout", parse=duration(0.1, 300, "100ms to 5m"), default="10s",
             help="deadline of one Prometheus query, 100ms to 5m"),
        flag("--prometheus-max-answer-bytes", field=p + "max_answer_bytes", parse=byte_size(64 * 1024, 1024**3),
             default="32Mi", help="largest Prometheus answer read, 64Ki to 1Gi; a larger one is refused with a 503"),
        flag("--prometheus-token-file", field=p + "token_file", parse=optional_path,
             help="file with a bearer token for Prometheus, re-read when it changes"),
        flag("--prometheus-ca-file", field=p + "ca_file", parse=optional_path,
             help="CA bundle that signed Prometheus's serving certificate"),
        flag("--prometheus-client-tls-cert-file", field=p + "client_cert_file", parse=optional_path,
             help="client certificate for Prometheus (with its key file)"),
        flag("--prometheus-client-tls-key-file", field=p + "client_key_file", parse=optional_path,
             help="key of the client certificate for Prometheus"),
        flag("--prometheus-header", field=p + "headers", parse=headers, default="", repeated=True,
             help="extra request header Key=Value; repeatable (one per line in the variable)"),
        flag("--prometheus-partial-response", field=p + "partial_response", parse=optional_boolean, default="",
             help="send partial_response=true or false with every request, as Thanos's querier reads it "
             "(default: not sent, the querier's own default applies)"),
        flag("--prometheus-series-limit", field=p + "series_limit", parse=integer(0, 10_000_000), default="30000",
             help="limit sent with each series listing of a relist, 0 to 10000000 (0: none); a listing cut there "
             "is logged"),
        flag("--prometheus-backend", field="backends", parse=backend_specs, default="", repeated=True,
             help="another Prometheus-compatible server, NAME=URL[,header=Key=Value][,partial-response=true|false], "
             "that rules name with their backend key; repeatable (one per line in the variable)"),
        flag("--prometheus-auth-incluster", field="prometheus_auth_incluster", parse=boolean, default="false",
             switch=True, help="use the pod's service-account token and CA"),
        flag("--prometheus-auth-config", field="prometheus_auth_config", parse=optional_path,
             help="kubeconfig file whose user credentials and CA are used for Prometheus"),
        flag("--config", field="config", parse=optional_path,
             help="prometheus-adapter rules file (default: the built-in GPU rules); reloaded on change"),
        flag("--config-check-interval", field="config_check_interval", parse=duration(0.1, 3600, "100ms to 1h"),
             default="5s", help="how often --config and certificate files are checked for changes"),
        flag("--metrics-relist-interval", field="relist_interval", parse=duration(1, 86400, "1s to 24h"),
             default="1m", help="how often to relist series names, 1s to 24h"),
        flag("--metrics-max-age", parse=duration(0, 30 * 86400, "the relist interval to 720h"),
             help="how far back a relist looks; at least the relist interval (default: the interval)"),
        flag("--discovery-interval", field="discovery_interval", parse=duration(10, 86400, "10s to 24h"),
             default="10m", help="how often API discovery (the REST mapping of resources) is read again, 10s to 24h"),
        flag("--metrics-cache-ttl", field="cache_ttl", parse=duration(0, 600, "0s to 10m"), default="250ms",
             help="how long a query result is reused, 0s to 10m"),
        flag("--secure-port", field="secure_port", parse=integer(0, 65535), default="6443",
             help="port to serve on, 0 to 65535; 0 picks a free one"),
        flag("--bind-address", field="bind_address", default="0.0.0.0", help="address to listen on"),
        flag("--shutdown-delay-duration", field="shutdown_delay", parse=duration(0, 600, "0s to 10m"), default="0s",
             help="after SIGTERM, how long to keep serving, /readyz failing, before the port closes and the requests "
             "in flight are finished: time for the Service's endpoints to drop this replica, 0s to 10m"),
        flag("--cert-dir", field="cert_dir", parse=optional_path,
             help="directory for apiserver.crt/apiserver.key; a self-signed pair is made there if absent"),
        flag("--tls-cert-file", field="tls_cert_file", parse=optional_path,
             help="serving certificate (with --tls-private-key-file)"),
        flag("--tls-private-key-file", field="tls_key_file", parse=optional_path, help="serving certificate's key"),
        flag("--tls-min-version", field="tls_min_version", parse=tls_version, default="VersionTLS12",
             help="oldest TLS version accepted: VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13"),
        flag("--tls-cipher-suites", field="tls_cipher_suites", parse=cipher_suites, default="", repeated=True,
             help="TLS 1.2 cipher suites offered, by Go's names, comma-separated (default: OpenSSL's choice); "
             "TLS 1.3 suites are not configurable"),
        flag("--insecure-serve-http", field="insecure_serve_http", parse=boolean, default="false", switch=True,
             help="serve plain HTTP (local runs; needs --insecure-disable-auth)"),
        flag("--insecure-disable-auth", field="insecure_disable_auth", parse=boolean, default="false", switch=True,
             help="serve every caller without authentication or authorization"),
        flag("--lister-kubeconfig", field="lister_kubeconfig", parse=optional_path,
             help="kubeconfig for listing pods, namespaces, nodes (default: in-cluster, if any)"),
        # klog takes any level (prometheus-adapter's chart passes --v=4; users go to 10 and beyond)
        flag("-v", "--v", field="verbosity", parse=integer(0, 2**31 - 1), default="0",
             help="log verbosity, 0 and up as klog's; 4 and above logs debug lines, 6 and above every request"),
        # authentication and authorization, as Kubernetes' generic API servers take them (section "auth")
        flag("--authentication-kubeconfig", field=a + "authentication_kubeconfig", parse=optional_path,
             help="kubeconfig for the ConfigMap and TokenReviews (default: in-cluster)"),
        flag("--authorization-kubeconfig", field=a + "authorization_kubeconfig", parse=optional_path,
             help="kubeconfig for SubjectAccessReviews (default: in-cluster)"),
        flag("--authentication-skip-lookup", field=a + "skip_lookup", parse=boolean, default="false", switch=True,
             help=f"do not read the {CONFIGMAP}"),
        flag("--authentication-token-webhook-cache-ttl", field=a + "token_cache_ttl", parse=_TTL, default="10s",
             help="how long TokenReview answers are reused, 0s to 1h"),
        flag("--authorization-webhook-cache-authorized-ttl", field=a + "authorized_ttl", parse=_TTL,
             default="10s", help="how long allowed reviews are reused, 0s to 1h"),
        flag("--authorization-webhook-cache-unauthorized-ttl", field=a + "unauthorized_ttl", parse=_TTL,
             default="10s", help="how long denied reviews are reused, 0s to 1h"),
        flag("--authorization-always-allow-paths", field=a + "always_allow_paths", parse=allow_paths,
             default=",".join(HEALTH_PATHS), repeated=True,
             help="paths served without authorization; comma-separated, repeatable"),
        flag("--client-ca-file", field=a + "client_ca_file", parse=optional_path,
             help=f"CA bundle for client certificates (default: from the {CONFIGMAP})"),
        flag("--requestheader-client-ca-file", field=a + "requestheader_client_ca_file", parse=optional_path,
             help=f"CA bundle for the front proxy (default: from the {CONFIGMAP})"),
        flag("--requestheader-allowed-names", field=a + "requestheader_allowed_names", parse=string_list,
             default="", repeated=True, help="certificate names the front proxy may use; comma-separated"),
        flag("--requestheader-username-headers", field=a + "requestheader_username_headers", parse=string_list,
             default="X-Remote-User", repeated=True, help="headers that carry the user name"),
        flag("--requestheader-group-headers", field=a + "requestheader_group_headers", parse=string_list,
             default="X-Remote-Group", repeated=True, help="headers that carry the groups"),
        flag("--requestheader-extra-headers-prefix", field=a + "requestheader_extra_headers_prefix",
             parse=string_list, default="X-Remote-Extra-", repeated=True,
             help="prefixes of headers that carry extra user information"),
    ]  # fmt: skip
    flags += [
        flag(f"--{name.replace('_', '-')}", *([f"--{name}"] if "_" in name else []), parse=optional_text, help="",
             ignored=reason)
        for reason, names in _IGNORED.items()
        for name in names
    ]  # fmt: skip
    return FlagTable(
        "gpuscale-adapter",
        "Serve custom.metrics.k8s.io and external.metrics.k8s.io from Prometheus.",
        "GPUSCALE_ADAPTER_",
        flags,
    )


FLAGS = _table()


def default(long: str) -> Any:
    return FLAGS.default(long)
