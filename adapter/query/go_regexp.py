"""Regular expressions as prometheus-adapter's Go ``regexp`` package reads them: RE2 syntax, matched by the RE2
library itself (PyPI ``google-re2``), and Go's ``Regexp.ExpandString`` for ``name.as``.

Python's ``re`` reads the same text differently, and not always with an error: ``[[:alpha:]]`` is a set of the
characters ``[:alph`` followed by a literal ``]`` (it matched nothing a user meant), while ``\\pL``, ``\\z`` and
``(?U)`` are refused. RE2 and Go share one syntax and one matching rule (leftmost-first); the one construct RE2
accepts and Go refuses is ``\\C`` (any byte), which no series name needs.
"""

from __future__ import annotations

import unicodedata
from typing import Any, Protocol

import re2


class _Match(Protocol):
    def span(self, group: int = 0) -> tuple[int, int]: ...


def _options() -> Any:
    options = re2.Options()
    # RE2 would also print every refused pattern to stderr; the error raised here says it once, with the rule
    options.log_errors = False
    return options


_OPTIONS = _options()


class GoRegexp:
    """A pattern compiled as Go's ``regexp.Compile`` does; ``ValueError`` says why a pattern is refused."""

    def __init__(self, pattern: str) -> None:
        try:
            self._regexp: Any = re2.compile(pattern, _OPTIONS)
        except re2.error as e:
            detail = e.args[0] if e.args else ""
            raise ValueError(detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)) from None
        self.pattern = pattern
        self.groups: int = self._regexp.groups
        self._names: dict[str, int] = dict(self._regexp.groupindex)

    def __repr__(self) -> str:
        return f"GoRegexp({self.pattern!r})"

    def search(self, text: str) -> bool:
        """Go's ``MatchString``: whether the pattern matches anywhere in ``text``."""
        return self._regexp.search(text) is not None

    def fullmatch(self, text: str) -> bool:
        return self._regexp.fullmatch(text) is not None

    def expand(self, template: str, text: str) -> str | None:
        """Go's ``FindStringSubmatchIndex`` then ``ExpandString(template)``; None when the pattern does not match."""
        match: _Match | None = self._regexp.search(text)
        if match is None:
            return None
        return expand(template, text, match, self._names, self.groups)


def expand(template: str, text: str, match: _Match, names: dict[str, int], groups: int) -> str:
    """Go's ``Regexp.expand``: ``$$`` is ``$``; ``$name`` takes the longest run of letters, digits and ``_``
    (``$1x`` is the group named ``1x``), ``${name}`` ends at the brace; a number with a leading zero is a name; an
    unknown or unmatched group gives ""; a ``$`` that starts no name stays as it is."""
    out: list[str] = []
    rest = template
    while True:
        before, dollar, rest = rest.partition("$")
        out.append(before)
        if not dollar:
            return "".join(out)
        if rest.startswith("$"):
            out.append("$")
            rest = rest[1:]
            continue
        parsed = _extract(rest)
        if parsed is None:
            out.append("$")
            continue
        name, rest = parsed
        index = _number(name)
        if index is None:
            index = names.get(name)
        if index is not None and index <= groups:
            start, end = match.span(index)
            if start >= 0:
                out.append(text[start:end])


def _is_name_char(char: str) -> bool:
    # Go's unicode.IsLetter (categories L*) and unicode.IsDigit (Nd), and '_'
    return char == "_" or unicodedata.category(char)[0] == "L" or unicodedata.category(char) == "Nd"


def _extract(text: str) -> tuple[str, str] | None:
    """Go's ``extract``: the name after a ``$`` and what follows it, or None when there is no valid name."""
    brace = text.startswith("{")
    body = text[1:] if brace else text
    end = 0
    while end < len(body) and _is_name_char(body[end]):
        end += 1
    if end == 0:
        return None
    name, rest = body[:end], body[end:]
    if brace:
        if not rest.startswith("}"):
            return None
        rest = rest[1:]
    return name, rest


def _number(name: str) -> int | None:
    """A group number as Go reads one: ASCII digits only, no leading zero, at most 9 of them."""
    if not all("0" <= c <= "9" for c in name) or (len(name) > 1 and name[0] == "0") or len(name) > 9:
        return None
    return int(name)
