"""Kubernetes label selectors: the grammar of ``k8s.io/apimachinery/pkg/labels``, parsing and matching.

    selector    ::= requirement ("," requirement)*
    requirement ::= "!" KEY | KEY | KEY ("=" | "==" | "!=") VALUE
                  | KEY ("in" | "notin") "(" VALUE ("," VALUE)* ")"
                  | KEY (">" | "<") INTEGER

Keys and values are validated as the API server does, so a selector the API server would refuse is refused
here too."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum

from adapter.errors import BadRequest, quoted


class Op(Enum):
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = ">"
    LESS_THAN = "<"


_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SPECIAL = "!=(),<>"


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: Op
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        match self.op:
            case Op.EQUALS | Op.DOUBLE_EQUALS | Op.IN:
                return value is not None and value in self.values
            case Op.NOT_EQUALS | Op.NOT_IN:
                return value is None or value not in self.values
            case Op.EXISTS:
                return value is not None
            case Op.DOES_NOT_EXIST:
                return value is None
            case Op.GREATER_THAN | Op.LESS_THAN:
                if value is None or not re.fullmatch(r"-?[0-9]+", value):
                    return False
                bound = int(self.values[0])
                return int(value) > bound if self.op is Op.GREATER_THAN else int(value) < bound

    def __str__(self) -> str:
        match self.op:
            case Op.EXISTS:
                return self.key
            case Op.DOES_NOT_EXIST:
                return f"!{self.key}"
            case Op.IN | Op.NOT_IN:
                return f"{self.key} {self.op.value} ({','.join(self.values)})"
            case _:
                return f"{self.key}{self.op.value}{self.values[0]}"


@dataclass(frozen=True, slots=True)
class Selector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __bool__(self) -> bool:
        return bool(self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    def to_label_selector(self) -> dict[str, object] | None:
        """The metav1.LabelSelector form, or None for an empty selector."""
        if not self.requirements:
            return None
        match_labels: dict[str, str] = {}
        expressions: list[dict[str, object]] = []
        names = {Op.IN: "In", Op.NOT_IN: "NotIn", Op.EXISTS: "Exists", Op.DOES_NOT_EXIST: "DoesNotExist"}
        for r in self.requirements:
            if r.op in (Op.EQUALS, Op.DOUBLE_EQUALS) and r.key not in match_labels:
                match_labels[r.key] = r.values[0]
            elif r.op in names:
                expression: dict[str, object] = {"key": r.key, "operator": names[r.op]}
                if r.values:
                    expression["values"] = list(r.values)
                expressions.append(expression)
            elif r.op is Op.NOT_EQUALS:
                expressions.append({"key": r.key, "operator": "NotIn", "values": list(r.values)})
            else:
                expressions.append({"key": r.key, "operator": "In", "values": list(r.values)})
        result: dict[str, object] = {}
        if match_labels:
            result["matchLabels"] = match_labels
        if expressions:
            result["matchExpressions"] = expressions
        return result


def _tokens(text: str) -> Iterator[tuple[str, str, int]]:
    """(kind, text, where it starts): kind is "id", an operator, or one of "(),!"; ends with ("end", "", len)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith(("==", "!="), i):
            yield text[i : i + 2], text[i : i + 2], i
            i += 2
        elif c in _SPECIAL:
            yield c, c, i
            i += 1
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in _SPECIAL:
                i += 1
            word = text[start:i]
            yield ("in" if word == "in" else "notin" if word == "notin" else "id"), word, start
    yield "end", "", n


_EXPECTED = {"id": "a label key or value", "end": "the end"}  # how an error names what should have come


class _Parser:
    def __init__(self, text: str, what: str) -> None:
        self.text = text
        self.what = what
        tokens = list(_tokens(text))
        self.tokens = [(kind, word) for kind, word, _ in tokens]
        self.starts = [start for _, _, start in tokens]
        self.pos = 0

    def fail(self, message: str) -> BadRequest:
        return BadRequest(f"unable to parse {self.what} {quoted(self.text)}: {message}")

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos]

    def take(self, *kinds: str) -> str:
        kind, word = self.tokens[self.pos]
        if kind not in kinds:
            found = quoted(word) if word else "the end"
            expected = " or ".join(_EXPECTED.get(k, repr(k)) for k in kinds)
            read = self.text[: self.starts[self.pos]].rstrip()
            where = f"after {quoted(read, tail=True)}" if read else "at the start"
            raise self.fail(f"found {found} {where}, expected {expected}")
        self.pos += 1
        return word

    def selector(self) -> Selector:
        if self.peek()[0] == "end":
            return Selector()
        requirements = [self.requirement()]
        while self.peek()[0] == ",":
            self.pos += 1
            requirements.append(self.requirement())
        self.take(",", "end")
        return Selector(tuple(requirements))

    def requirement(self) -> Requirement:
        if self.peek()[0] == "!":
            self.pos += 1
            return Requirement(self.key(self.take("id")), Op.DOES_NOT_EXIST)
        key = self.key(self.take("id"))
        kind = self.peek()[0]
        if kind in (",", "end"):
            return Requirement(key, Op.EXISTS)
        op = Op(self.take("=", "==", "!=", "in", "notin", ">", "<"))
        if op in (Op.IN, Op.NOT_IN):
            return Requirement(key, op, self.value_set())
        if op in (Op.GREATER_THAN, Op.LESS_THAN):
            number = self.take("id")
            if not re.fullmatch(r"-?[0-9]+", number):
                raise self.fail(f"for {op.value!r} the value must be an integer, not {quoted(number)}")
            return Requirement(key, op, (number,))
        value = self.take("id") if self.peek()[0] == "id" else ""
        return Requirement(key, op, (self.value(value),))

    def value_set(self) -> tuple[str, ...]:
        self.take("(")
        values: list[str] = []
        while True:
            values.append(self.value(self.take("id") if self.peek()[0] == "id" else ""))
            if self.take(",", ")") == ")":
                break
        if values == [""]:
            raise self.fail("for 'in', 'notin' operators, values set can't be empty")
        return tuple(sorted(set(values)))

    def key(self, key: str) -> str:
        prefix, _, name = key.rpartition("/")
        if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
            raise self.fail(f"invalid label key {quoted(key)}: the prefix must be a DNS subdomain")
        if len(name) > 63 or not _NAME.match(name):
            raise self.fail(
                f"invalid label key {quoted(key)}: name part must be 63 characters or less, consist of "
                "alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"
            )
        return key

    def value(self, value: str) -> str:
        if value and (len(value) > 63 or not _NAME.match(value)):
            raise self.fail(
                f"invalid label value {quoted(value)}: must be 63 characters or less, empty or consist of "
                "alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"
            )
        return value


def parse_selector(text: str, what: str = "labelSelector") -> Selector:
    """Parse Kubernetes label-selector text; ``BadRequest`` names the problem and which parameter held it."""
    return _Parser(text, what).selector()
