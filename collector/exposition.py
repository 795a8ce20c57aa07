"""Metric families → Prometheus text format 0.0.4 and OpenMetrics 1.0.

A renderer of our own because dcgm-exporter's counters have no ``_total`` suffix and dashboards query the bare
names; prometheus_client would rename them. In the text format they stay ``counter``; OpenMetrics requires
``_total`` on counter samples, so there such families are typed ``unknown`` under their bare names. That is why the
text format is served to every client that accepts it (``wants_openmetrics``), as dcgm-exporter serves it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@dataclass(frozen=True)
class Family:
    name: str
    type: str  # "gauge", "counter" or "unknown"
    help: str
    samples: tuple[tuple[Labels, float], ...]


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _sample_line(name: str, labels: Labels, value: float) -> str:
    if labels:
        inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
        return f"{name}{{{inner}}} {format_value(value)}\n"
    return f"{name} {format_value(value)}\n"


def _encoded(text: str) -> bytes:
    """UTF-8, a lone surrogate (a pod label or a ConfigMap's help text may hold one: JSON's ``"\\ud800"``) as ``?``:
    strict encoding would fail the whole page, and the page must be UTF-8 for Prometheus to take it."""
    return text.encode("utf-8", errors="replace")


def render_text(families: Iterable[Family]) -> bytes:
    out: list[str] = []
    for family in families:
        out.append(f"# HELP {family.name} {_escape_help(family.help)}\n")
        out.append(f"# TYPE {family.name} {family.type}\n")
        out.extend(_sample_line(family.name, labels, value) for labels, value in family.samples)
    return _encoded("".join(out))


def render_openmetrics(families: Iterable[Family]) -> bytes:
    out: list[str] = []
    for family in families:
        name, type_ = family.name, family.type
        if type_ == "counter":
            if name.endswith("_total"):
                name = name.removesuffix("_total")
            else:
                type_ = "unknown"
        out.append(f"# TYPE {name} {type_}\n")
        out.append(f"# HELP {name} {_escape_help(family.help)}\n")
        out.extend(_sample_line(family.name, labels, value) for labels, value in family.samples)
    out.append("# EOF\n")
    return _encoded("".join(out))


_TEXT_MEDIA = frozenset({"text/plain", "text/*", "*/*"})


def wants_openmetrics(accept: str) -> bool:
    """Whether to answer in OpenMetrics: only when the ``Accept`` header allows OpenMetrics and no text format.

    OpenMetrics adds nothing these series use (no exemplars, no created timestamps) and costs the bare-named
    counters their type; Prometheus asks for OpenMetrics first but accepts ``text/plain``, so it gets the text
    format and stores DCGM counters as counters. A media range with ``q=0`` is refused, as RFC 9110 says.
    """
    openmetrics = False
    for part in accept.split(","):
        media, *params = part.split(";")
        media = media.strip().lower()
        if _quality(params) <= 0:
            continue
        if media in _TEXT_MEDIA:
            return False
        openmetrics = openmetrics or media == "application/openmetrics-text"
    return openmetrics


def _quality(params: list[str]) -> float:
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0  # a malformed weight accepts nothing
    return 1.0
