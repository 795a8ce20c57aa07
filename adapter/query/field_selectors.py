"""Kubernetes field selectors as metrics.k8s.io takes them: ``metadata.name=x,metadata.namespace!=y``.

The grammar is ``k8s.io/apimachinery/pkg/fields``: terms split at unescaped commas, each ``field=value``,
``field==value`` or ``field!=value`` (the first operator found wins), values with the escapes ``\\\\``, ``\\,`` and
``\\=``. The resource metrics types register no field conversions, so the API server allows only the two fields
every object has (``metadata.name``, ``metadata.namespace``); any other is a 400, as there."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from adapter.errors import BadRequest

FIELDS = ("metadata.name", "metadata.namespace")
_OPERATORS = ("!=", "==", "=")
_ESCAPABLE = "\\,="


@dataclass(frozen=True, slots=True)
class FieldSelector:
    terms: tuple[tuple[str, bool, str], ...] = ()  # (field, equal, value)

    def matches(self, fields: Mapping[str, str]) -> bool:
        """Whether an object with these field values is selected; a field it lacks has the value ""."""
        return all((fields.get(field, "") == value) == equal for field, equal, value in self.terms)


def parse_field_selector(text: str) -> FieldSelector:
    """``BadRequest`` names what is wrong with ``text``, as the API server's message does."""
    terms = []
    for term in _split_terms(text):
        if not term:
            continue
        field, op, raw = _split_term(term, text)
        if field not in FIELDS:
            raise BadRequest(f'"{field}" is not a known field selector: only "{FIELDS[0]}", "{FIELDS[1]}"')
        terms.append((field, op != "!=", _unescape(raw)))
    return FieldSelector(tuple(sorted(terms)))


def _split_terms(text: str) -> list[str]:
    terms, start, escaped = [], 0, False
    for i, c in enumerate(text):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str, text: str) -> tuple[str, str, str]:
    for i in range(len(term)):
        for op in _OPERATORS:
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    raise BadRequest(
        f"invalid fieldSelector {text!r}: can't understand {term!r} (expected field=value or field!=value)"
    )


def _unescape(value: str) -> str:
    out, escaped = [], False
    for c in value:
        if escaped:
            if c not in _ESCAPABLE:
                raise BadRequest(f"invalid fieldSelector: invalid escape sequence \\{c} in {value!r}")
            out.append(c)
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in ",=":
            raise BadRequest(f"invalid fieldSelector: unescaped character {c!r} in {value!r}")
        else:
            out.append(c)
    if escaped:
        raise BadRequest(f"invalid fieldSelector: {value!r} ends with an unfinished escape")
    return "".join(out)
