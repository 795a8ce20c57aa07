"""The Prometheus-compatible servers the adapter asks: ``--prometheus-url``'s, named ``default``, and each
``--prometheus-backend``, which rules pick by name with their ``backend`` key (KEDA lets each trigger name its
server; prometheus-adapter has one server for every rule).

``--prometheus-backend NAME=URL[,header=Key=Value]...[,partial-response=true|false]``: a name (lower-case letters,
digits and '-', as a Kubernetes object's), the base URL, then options, comma-separated. A named backend takes
everything else from the ``--prometheus-*`` flags (timeout, verb, TLS, credentials, headers, partial responses,
series limit); its own headers replace the flags' headers of the same name (a tenant's ``X-Scope-OrgID``) and its
``partial-response`` replaces ``--prometheus-partial-response``.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from common.flags import boolean

DEFAULT = "default"  # the --prometheus-url server; rules without a backend key use it
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_OPTIONS = ("header", "partial-response")


@dataclass(frozen=True)
class BackendSpec:
    name: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    partial_response: bool | None = None  # None: as --prometheus-partial-response says


def prometheus_url(text: str) -> str | None:
    parsed = urllib.parse.urlsplit(text)
    if text and (parsed.scheme not in ("http", "https") or not parsed.netloc):
        raise ValueError(f"{text!r} is not an http:// or https:// URL")
    return text or None


def optional_boolean(text: str) -> bool | None:
    """true or false; empty: not set."""
    return boolean(text) if text.strip() else None


def header(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{text!r} is not Key=Value")
    return key.strip(), value.strip()


def backend_specs(text: str) -> tuple[BackendSpec, ...]:
    """One backend a line (the flag repeated, or the variable's lines); names must differ."""
    specs: dict[str, BackendSpec] = {}
    for line in filter(str.strip, text.splitlines()):
        spec = _spec(line.strip())
        if spec.name in specs:
            raise ValueError(f"the backend {spec.name!r} is given twice")
        specs[spec.name] = spec
    return tuple(specs.values())


def _spec(text: str) -> BackendSpec:
    first, *options = text.split(",")
    name, sep, url = first.partition("=")
    name = name.strip()
    if not sep:
        raise ValueError(f"{text!r} is not NAME=URL[,header=Key=Value][,partial-response=true|false]")
    if not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a backend name (lower-case letters, digits and '-', at most 63)")
    if name == DEFAULT:
        raise ValueError(f"{DEFAULT!r} names the --prometheus-url server; give this backend another name")
    if not url.strip():
        raise ValueError(f"the backend {name!r} has no URL")
    checked = prometheus_url(url.strip())
    assert checked is not None
    headers: list[tuple[str, str]] = []
    partial: bool | None = None
    for option in options:
        key, sep, value = option.partition("=")
        key = key.strip()
        if not sep or key not in _OPTIONS:
            raise ValueError(
                f"the backend {name!r}: {option.strip()!r} is not an option ({', '.join(o + '=' for o in _OPTIONS)}); "
                "a URL cannot hold a comma here"
            )
        if key == "header":
            headers.append(header(value))
        else:
            partial = optional_boolean(value)
    return BackendSpec(name, checked, tuple(headers), partial)
