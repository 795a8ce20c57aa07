"""The pieces of Kubernetes' wire format the stand-ins need, written from the Kubernetes documentation.

They are deliberately not the adapter's own code: the stand-ins (and the tests through them) check the adapter
against these, so a mistake in the adapter cannot hide behind the same mistake in the fake.

- ``status_body``: the ``Status`` object an API server answers errors with (API conventions, "Response Status Kind").
- ``LabelSelector``: label selectors as "Labels and Selectors" defines them: equality-based (``=``, ``==``, ``!=``),
  set-based (``in``, ``notin``, ``key``, ``!key``) and the ``>``/``<`` integer comparisons, comma-separated (AND).
- ``representation``: which representation of an object an ``Accept`` header asks for ("Retrieving large results
  sets in chunks" and "Receiving resources as Tables" of API concepts; the metadata-only client of client-go): the
  first media type the server can serve wins; ``application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`` (and
  ``...List`` for a list) asks for metadata only; ``application/json``, ``*/*`` or no header the full object; None
  when nothing offered can be served (406).
- ``parse_quantity``: resource quantities as "Quantity" defines them: a decimal number with a decimal-SI suffix
  (``n u m k M G T P E``), a binary suffix (``Ki Mi Gi Ti Pi Ei``) or a decimal exponent (``e3``, ``E-2``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


PARTIAL = "PartialObjectMetadata"
META_GROUP_VERSION = "meta.k8s.io/v1"


def representation(accept: str | None, kind: str) -> str | None:
    """What the ``Accept`` header asks for an answer of ``kind`` (``PartialObjectMetadata`` for one object or a watch's
    objects, ``PartialObjectMetadataList`` for a list): ``kind`` (metadata only), "" (the full object), or None
    (nothing it asks for)."""
    if not accept:
        return ""
    for offer in accept.split(","):
        media, *raw = (part.strip() for part in offer.split(";"))
        params = dict(p.split("=", 1) for p in raw if "=" in p)
        params.pop("q", None)
        if media not in ("application/json", "application/*", "*/*"):
            continue  # protobuf, YAML: not served here
        wanted = params.get("as")
        if wanted is None:
            return ""
        if (wanted, params.get("g"), params.get("v")) == (kind, "meta.k8s.io", "v1"):
            return kind
    return None


def partial(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as ``PartialObjectMetadata``: its metadata only."""
    return {"kind": PARTIAL, "apiVersion": META_GROUP_VERSION, "metadata": obj.get("metadata", {})}


class SelectorError(ValueError):
    """A label selector the API server would refuse with 400 BadRequest."""


# a label key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = rf"(?:[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}"
_VALUE = rf"(?:{_NAME})?"
_REQUIREMENT = re.compile(
    rf"""\s*(?:
        (?P<not>!)\s*(?P<absent>{_KEY})
      | (?P<key>{_KEY})\s*(?:
            (?P<op>==|=|!=|>|<)\s*(?P<value>{_VALUE})
          | \s(?P<setop>in|notin)\s*\(\s*(?P<values>{_VALUE}(?:\s*,\s*{_VALUE})*)\s*\)
        )?
    )\s*(?:,|$)""",
    re.X,
)


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # exists, !exists, =, !=, in, notin, >, <
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if not present or not re.fullmatch(r"-?\d+", value):
            return False
        limit = int(next(iter(self.values)))
        return int(value) > limit if self.op == ">" else int(value) < limit


class LabelSelector:
    def __init__(self, text: str) -> None:
        self.requirements: list[_Requirement] = []
        position = 0
        text = text.strip()
        while position < len(text):
            match = _REQUIREMENT.match(text, position)
            if match is None or match.end() == position:
                raise SelectorError(f"unable to parse requirement: {text[position:]!r}")
            self.requirements.append(_requirement(match))
            position = match.end()

    def matches(self, labels: dict[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def _requirement(match: re.Match[str]) -> _Requirement:
    if match["absent"]:
        return _Requirement(match["absent"], "!exists")
    key = match["key"]
    if match["setop"]:
        return _Requirement(key, match["setop"], frozenset(v.strip() for v in match["values"].split(",")))
    op = match["op"]
    if op is None:
        return _Requirement(key, "exists")
    value = match["value"] or ""
    if op in (">", "<") and not re.fullmatch(r"-?\d+", value):
        raise SelectorError(f"for '{op}' the value must be an integer, got {value!r}")
    return _Requirement(key, "=" if op == "==" else op, frozenset({value}))


_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_QUANTITY = re.compile(r"(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))(?P<suffix>[a-zA-Z]*|[eE][+-]?\d+)")


def parse_quantity(text: str) -> Decimal:
    """The exact value of a quantity ("95500m" → 95.5, "1Ki" → 1024, "1e3" → 1000); ValueError for anything else."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = Decimal(match["number"]), match["suffix"]
    exact = Context(prec=1000)
    if suffix in _DECIMAL_SUFFIXES:
        return number.scaleb(_DECIMAL_SUFFIXES[suffix], context=exact)
    if suffix in _BINARY_SUFFIXES:
        return exact.multiply(number, Decimal(2) ** _BINARY_SUFFIXES[suffix])
    if suffix[:1] in ("e", "E") and suffix[1:].lstrip("+-").isdigit():
        return number.scaleb(int(suffix[1:]), context=exact)
    raise ValueError(f"unknown suffix in quantity {text!r}")
