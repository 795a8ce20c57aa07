"""PromQL text built from parts, as pure functions: every value is quoted, every regex alternative escaped.

A value handed to these functions only ever matches itself, whatever it holds (quotes, backslashes, ``|``,
``.*``, ``}``, newlines): string literals escape what PromQL's lexer unescapes, and regex alternatives escape
every RE2 metacharacter before they are quoted."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from adapter.errors import BadRequest
from adapter.query.go_regexp import GoRegexp
from adapter.query.selectors import Op, Selector

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_STRING_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_QUOTE = str.maketrans(
    {
        **{chr(c): f"\\u{c:04x}" for c in (*range(0x20), 0x7F)},
        **_STRING_ESCAPES,
    }
)
_NEEDS_QUOTING = re.compile(r'[\\"\x00-\x1f\x7f]')
_REGEX_ESCAPE = str.maketrans({c: "\\" + c for c in "\\.+*?()|[]{}^$"})


def quote(value: str) -> str:
    """A PromQL double-quoted string literal whose unescaped content is exactly ``value``."""
    if _NEEDS_QUOTING.search(value) is None:
        return f'"{value}"'
    return f'"{value.translate(_QUOTE)}"'


def regex_escape(value: str) -> str:
    """``value`` as an RE2 pattern matching only itself (Prometheus anchors regex matchers at both ends)."""
    return value.translate(_REGEX_ESCAPE)


def alternation(values: Iterable[str]) -> str:
    """A regex matching exactly the given values; sorted so the same set always gives the same text."""
    return "|".join(regex_escape(v) for v in sorted(set(values)))


def matcher(label: str, op: str, value: str) -> str:
    if not _LABEL_NAME.match(label):
        raise ValueError(f"invalid Prometheus label name {label!r}")
    return f"{label}{op}{quote(value)}"


def names_matcher(label: str, names: Iterable[str]) -> str:
    """``label="name"`` for one name, ``label=~"a|b"`` (escaped) for several."""
    return names_matcher_and_alternation(label, names)[0]


def names_matcher_and_alternation(label: str, names: Iterable[str]) -> tuple[str, str]:
    """The names matcher, and the escaped alternation inside its quotes (``LabelValuesByName``), built once."""
    unique = sorted(set(names))
    if not unique:
        raise ValueError("names_matcher needs at least one name")
    quoted = quote("|".join(map(regex_escape, unique)))
    if len(unique) == 1:
        return matcher(label, "=", unique[0]), quoted[1:-1]
    if not _LABEL_NAME.match(label):
        raise ValueError(f"invalid Prometheus label name {label!r}")
    return f"{label}=~{quoted}", quoted[1:-1]


def selector_matchers(selector: Selector, what: str = "metricLabelSelector") -> list[str]:
    """A Kubernetes label selector as Prometheus matchers; ``BadRequest`` for what PromQL cannot express."""
    out: list[str] = []
    for r in selector.requirements:
        if not _LABEL_NAME.match(r.key):
            raise BadRequest(f"{what} key {r.key!r} is not a valid Prometheus label name")
        match r.op:
            case Op.EQUALS | Op.DOUBLE_EQUALS:
                out.append(matcher(r.key, "=", r.values[0]))
            case Op.NOT_EQUALS:
                out.append(matcher(r.key, "!=", r.values[0]))
            case Op.IN:
                out.append(names_matcher(r.key, r.values))
            case Op.NOT_IN if len(r.values) == 1:
                out.append(matcher(r.key, "!=", r.values[0]))
            case Op.NOT_IN:
                out.append(matcher(r.key, "!~", alternation(r.values)))
            case Op.EXISTS:
                out.append(matcher(r.key, "!=", ""))
            case Op.DOES_NOT_EXIST:
                out.append(matcher(r.key, "=", ""))
            case _:
                raise BadRequest(f"{what} operator {r.op.value!r} (in {r}) has no PromQL equivalent")
    return out


@dataclass(frozen=True, slots=True)
class SeriesSelector:
    """A parsed series selector (``name{a="b",c=~"d"}``), as in a rule's seriesQuery."""

    name: str | None
    matchers: tuple[tuple[str, str, str], ...]

    def literal_name(self) -> str | None:
        """The one metric name this selector can match, if it pins one."""
        names = self.literal_names()
        return names[0] if len(names) == 1 else None

    def literal_names(self) -> tuple[str, ...]:
        """The metric names this selector can match, if it pins them: its name, ``__name__="a"``, or an alternation
        of plain names ``__name__=~"a|b|c"`` (each alternative a metric name, no regex operator); else none."""
        if self.name:
            return (self.name,)
        for label, op, value in self.matchers:
            if label == "__name__" and op == "=":
                return (value,)
        for label, op, value in self.matchers:
            if label == "__name__" and op == "=~":
                names = tuple(dict.fromkeys(value.split("|")))
                if all(_METRIC_NAME.fullmatch(n) for n in names):
                    return names
        return ()

    def pinned_to(self, name: str) -> SeriesSelector:
        """This selector for the one metric ``name``, one of its ``literal_names``."""
        rest = tuple(m for m in self.matchers if m[0] != "__name__")
        return SeriesSelector(None, (("__name__", "=", name), *rest))

    def __str__(self) -> str:
        parts = [f"{label}{op}{quote(value)}" for label, op, value in self.matchers]
        return f"{self.name or ''}{{{','.join(parts)}}}"


_SELECTOR_TOKEN = re.compile(
    r"""\s*(?:(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)|(?P<op>=~|!~|!=|=)|(?P<punct>[{},])"""
    r"""|(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`))""",
    re.DOTALL,
)


def _unquote(literal: str) -> str:
    if literal[0] == "`":
        return literal[1:-1]
    body = literal[1:-1]
    try:
        return body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError as e:
        raise ValueError(f"invalid escape in {literal}") from e


def parse_series_selector(text: str) -> SeriesSelector:
    """Parse a series selector; ``ValueError`` says what is wrong."""
    tokens: list[tuple[str, str]] = []
    pos, text = 0, text.strip()
    while pos < len(text):
        m = _SELECTOR_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"unexpected character {text[pos]!r} at offset {pos} in series selector {text!r}")
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    name: str | None = None
    i = 0
    if tokens and tokens[0][0] == "name":
        name = tokens[0][1]
        i = 1
    matchers: list[tuple[str, str, str]] = []
    if i < len(tokens):
        if tokens[i] != ("punct", "{") or tokens[-1] != ("punct", "}"):
            raise ValueError(f"series selector {text!r} must be a metric name and/or {{matchers}}")
        body = tokens[i + 1 : -1]
        j = 0
        while j < len(body):
            chunk = body[j : j + 3]
            if len(chunk) < 3 or [k for k, _ in chunk] != ["name", "op", "string"]:
                raise ValueError(f"malformed matcher in series selector {text!r}")
            matchers.append((chunk[0][1], chunk[1][1], _unquote(chunk[2][1])))
            j += 3
            if j < len(body):
                if body[j] != ("punct", ","):
                    raise ValueError(f"expected ',' between matchers in series selector {text!r}")
                j += 1
    if name is None and not matchers:
        raise ValueError(f"series selector {text!r} selects nothing")
    if name is None and all(_matches_empty(op, v) for _, op, v in matchers):
        raise ValueError(f"series selector {text!r} needs at least one matcher that does not match the empty string")
    return SeriesSelector(name, tuple(matchers))


def _matches_empty(op: str, value: str) -> bool:
    if op == "=":
        return value == ""
    if op == "!=":
        return value != ""
    try:
        empty = GoRegexp(value).fullmatch("")  # Prometheus's regexes are Go's (RE2), anchored at both ends
    except ValueError:
        return False
    return empty if op == "=~" else not empty


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_RANGE = re.compile(r"\[\s*((?:\d+(?:ms|s|m|h|d|w|y))+)\s*(?::[^\]]*)?\]")


def duration_seconds(text: str) -> float:
    """A Prometheus duration (``1m30s``) in seconds; ``ValueError`` if it is not one."""
    if not text or _DURATION.sub("", text):
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in _DURATION.findall(text))


def window_seconds(query: str) -> int | None:
    """The longest range-vector window in a query (``rate(x[2m])`` → 120), or None for an instant query."""
    windows = [duration_seconds(m.group(1)) for m in _RANGE.finditer(query)]
    return int(max(windows)) if windows else None
