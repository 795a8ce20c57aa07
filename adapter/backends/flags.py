"""The backends' part of the adapter's flags: the Prometheus connection (``PrometheusConfig``, section
``prometheus``), the named backends and Prometheus's credentials, each with its parser and default."""

from __future__ import annotations

import re
from collections.abc import Callable

from adapter.backends.backend_specs import backend_specs, header, optional_boolean, prometheus_url
from common.flags import Flag, boolean, choice, defaults_of, duration, flag, integer, optional_path


def verb(text: str) -> str:
    return str(choice("GET", "POST")(text.upper()))


def headers(text: str) -> tuple[tuple[str, str], ...]:
    """``Key=Value`` per line (the flag repeated, or the variable's lines)."""
    return tuple(map(header, filter(str.strip, text.splitlines())))


_BYTE_UNITS = {"Gi": 1024**3, "Mi": 1024**2, "Ki": 1024, "": 1}


def byte_size(low: int, high: int, off: bool = False) -> Callable[[str], int]:
    """Bytes as a whole number, or with Kubernetes' binary suffix Ki, Mi or Gi, from ``low`` to ``high``; ``off``:
    0 too, for no bound."""
    valid = f"{show_bytes(low)} to {show_bytes(high)}{', or 0' if off else ''}"

    def parse(text: str) -> int:
        match = re.fullmatch(r"\s*(\d{1,15})(Ki|Mi|Gi)?\s*", text)
        if match is None:
            raise ValueError(f"{text!r} is not a number of bytes (a whole number, or one ending in Ki, Mi or Gi)")
        value = int(match[1]) * _BYTE_UNITS[match[2] or ""]
        if not (low <= value <= high or (off and value == 0)):
            raise ValueError(f"{text.strip()} is outside the valid range {valid}")
        return value

    return parse


def show_bytes(value: int) -> str:
    """A number of bytes as a flag would say it: 33554432 → 32Mi."""
    unit = next(u for u, size in _BYTE_UNITS.items() if value % size == 0)
    return f"{value // _BYTE_UNITS[unit]}{unit}"


FLAGS: tuple[Flag, ...] = (
    flag("--prometheus-url", field="prometheus.url", parse=prometheus_url,
         help="Prometheus base URL, required (for example http://prometheus.monitoring.svc:9090)"),
    flag("--prometheus-verb", field="prometheus.verb", parse=verb, default="GET",
         help="GET or POST for queries; long queries use POST anyway"),
    flag("--prometheus-timeout", field="prometheus.timeout", parse=duration(0.1, 300, "100ms to 5m"), default="10s",
         help="deadline of one Prometheus query, 100ms to 5m"),
    flag("--prometheus-max-answer-bytes", field="prometheus.max_answer_bytes", parse=byte_size(64 * 1024, 1024**3),
         default="32Mi", help="largest Prometheus answer read, 64Ki to 1Gi; a larger one is refused with a 503"),
    # One answer of the default largest size and half as much again of others; not less than one of that size,
    # which could not be read at all. Reading and decoding hold about 4.3 bytes of memory per byte of answer
    # (answer_budget.py): some 210 MiB here, which with the adapter's own 95 MiB, the query cache's 64 MiB and the
    # answer memo's 32 MiB leaves room under the manifests' 512Mi memory limit. Six requests at once over 30 MB
    # answers (bench/answer_budget.py) peaked at 327-336 MiB; at 64Mi at 371-456 MiB, in the same time (18-21 s):
    # on two cores, decoding two answers at once is no faster.
    flag("--prometheus-max-bytes-in-flight", field="prometheus.max_bytes_in_flight",
         parse=byte_size(64 * 1024, 64 * 1024**3, off=True), default="48Mi",
         help="most bytes of Prometheus answers read and decoded at once, over every query and backend, 64Ki to "
         "64Gi, or 0 for no bound; an answer waits for room until its deadline (then a 503), one larger than this "
         "is refused with a 503; memory meanwhile is about 4 times this"),
    flag("--prometheus-token-file", field="prometheus.token_file", parse=optional_path,
         help="file with a bearer token for Prometheus, re-read when it changes"),
    flag("--prometheus-ca-file", field="prometheus.ca_file", parse=optional_path,
         help="CA bundle that signed Prometheus's serving certificate"),
    flag("--prometheus-client-tls-cert-file", field="prometheus.client_cert_file", parse=optional_path,
         help="client certificate for Prometheus (with its key file)"),
    flag("--prometheus-client-tls-key-file", field="prometheus.client_key_file", parse=optional_path,
         help="key of the client certificate for Prometheus"),
    flag("--prometheus-header", field="prometheus.headers", parse=headers, default="", repeated=True,
         help="extra request header Key=Value; repeatable (one per line in the variable)"),
    flag("--prometheus-partial-response", field="prometheus.partial_response", parse=optional_boolean, default="",
         help="send partial_response=true or false with every request, as Thanos's querier reads it "
         "(default: not sent, the querier's own default applies)"),
    flag("--prometheus-series-limit", field="prometheus.series_limit", parse=integer(0, 10_000_000),
         default="30000",
         help="limit sent with each series listing of a relist, 0 to 10000000 (0: none); a listing cut there "
         "is logged"),
    flag("--prometheus-backend", field="backends", parse=backend_specs, default="", repeated=True,
         help="another Prometheus-compatible server, NAME=URL[,header=Key=Value][,partial-response=true|false], "
         "that rules name with their backend key; repeatable (one per line in the variable)"),
    flag("--prometheus-auth-incluster", field="prometheus_auth_incluster", parse=boolean, default="false",
         switch=True, help="use the pod's service-account token and CA"),
    flag("--prometheus-auth-config", field="prometheus_auth_config", parse=optional_path,
         help="kubeconfig file whose user credentials and CA are used for Prometheus"),
)  # fmt: skip
default = defaults_of(FLAGS)
