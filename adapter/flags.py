"""The adapter's command line: the flags of each package (``backends/flags.py``, ``security/flags.py``,
``keda/flags.py``), the adapter's own, and prometheus-adapter's that act on nothing here, in one table with
``GPUSCALE_ADAPTER_*`` variables. ``Settings`` takes its defaults from it."""

from __future__ import annotations

from typing import Any

from adapter.backends import flags as backend_flags
from adapter.backends.auth_api import CONFIGMAP
from adapter.keda import flags as keda_flags
from adapter.security import flags as security_flags
from common.flags import FlagTable, boolean, duration, flag, integer, optional_path, optional_text

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
    "requests are bounded by the connection limits of common/connections.py, not by API Priority and Fairness": (
        "enable-priority-and-fairness",
    ),
    "there are no Kubernetes feature gates here": ("feature-gates",),
    "the API server is not rate-limited on the client side: objects are watched and reviews cached": (
        "client-qps", "client-burst",
    ),
}  # fmt: skip


def _table() -> FlagTable:
    flags = [
        *backend_flags.FLAGS,
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
        flag("--backend-failure-hold", field="backend_failure_hold", parse=duration(0, 86400, "0s to 24h"),
             default="0s",
             help="while Prometheus fails (unreachable, timeout, an error answer), answer each question with its last "
             "good answer for at most this long after it was read, then 503; 0s to 24h (0s: 503 at once)"),
        flag("--secure-port", field="secure_port", parse=integer(0, 65535), default="6443",
             help="port to serve on, 0 to 65535; 0 picks a free one"),
        flag("--bind-address", field="bind_address", default="0.0.0.0", help="address to listen on"),
        flag("--shutdown-delay-duration", field="shutdown_delay", parse=duration(0, 600, "0s to 10m"), default="0s",
             help="after SIGTERM, how long to keep serving, /readyz failing, before the port closes and the requests "
             "in flight are finished: time for the Service's endpoints to drop this replica, 0s to 10m"),
        *security_flags.TLS_FLAGS,
        flag("--insecure-serve-http", field="insecure_serve_http", parse=boolean, default="false", switch=True,
             help="serve plain HTTP (local runs; needs --insecure-disable-auth)"),
        flag("--insecure-disable-auth", field="insecure_disable_auth", parse=boolean, default="false", switch=True,
             help="serve every caller without authentication or authorization"),
        flag("--lister-kubeconfig", field="lister_kubeconfig", parse=optional_path,
             help="kubeconfig for listing pods, namespaces, nodes (default: in-cluster, if any)"),
        # klog takes any level (prometheus-adapter's chart passes --v=4; users go to 10 and beyond)
        flag("-v", "--v", field="verbosity", parse=integer(0, 2**31 - 1), default="0",
             help="log verbosity, 0 and up as klog's; 4 and above logs debug lines, 6 and above every request"),
        *security_flags.AUTH_FLAGS,
        *keda_flags.FLAGS,
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
