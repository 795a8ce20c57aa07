"""The part of Go's text/template that prometheus-adapter rules use, with its ``<<`` ``>>`` delimiters.

Supported: text; ``<<.Field>>`` and ``<<.Map.key>>`` chains; variables (``$``, ``$x := ...``, ``$x = ...``); string,
raw-string, number and boolean literals; parenthesised pipelines and ``|`` pipes; ``if``, ``else if``, ``else``;
``range`` (with ``$i, $v :=`` and ``else``); ``with``; trim markers ``<<-`` and ``->>``; comments; the functions
``index len not and or eq ne lt le gt ge print printf println``. Anything else is a compile error, raised when the
rules are loaded, never while answering a request.

Data is given as ``Struct`` (a Go struct: an unknown field is an error) or plain dicts and lists (Go maps and slices:
a missing key gives the zero value).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from adapter.errors import TemplateError
from adapter.naming.template_parser import Compiler, Node
from adapter.query.promql import quote

__all__ = ["Struct", "Template", "TemplateError", "compile_template"]


class Struct(dict[str, Any]):
    """A Go struct: fields looked up by name, and an unknown one is an error."""


def _fmt(value: Any) -> str:
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{_fmt(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list | tuple):
        return "[" + " ".join(_fmt(v) for v in value) + "]"
    return str(value)


def _truth(value: Any) -> bool:
    return bool(value)


def _printf(fmt: str, *args: Any) -> str:
    queue = list(args)

    def one(m: re.Match[str]) -> str:
        if m.group(1) == "%":
            return "%"
        if not queue:
            return f"%!{m.group(1)}(MISSING)"
        v = queue.pop(0)
        return quote(_fmt(v)) if m.group(1) == "q" else _fmt(v)

    return re.sub(r"%([svdq%])", one, fmt)


def _index(item: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(item, Mapping):
            item = item.get(key, "")
        elif isinstance(item, list | tuple) and isinstance(key, int) and 0 <= key < len(item):
            item = item[key]
        else:
            raise TemplateError(f"index of {_fmt(key)} out of range or not indexable")
    return item


_FUNCS: dict[str, Callable[..., Any]] = {
    "index": _index,
    "len": len,
    "not": lambda v: not _truth(v),
    "and": lambda *v: next((x for x in v if not _truth(x)), v[-1]),
    "or": lambda *v: next((x for x in v if _truth(x)), v[-1]),
    "eq": lambda a, *b: any(a == x for x in b),
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "print": lambda *v: "".join(_fmt(x) for x in v),
    "println": lambda *v: " ".join(_fmt(x) for x in v) + "\n",
    "printf": _printf,
}


class Template:
    """A compiled template; ``render`` takes the data as a ``Struct``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._nodes = Compiler(text).compile()

    def render(self, data: Any) -> str:
        out: list[str] = []
        self._run(self._nodes, data, [{"$": data}], out)
        return "".join(out)

    def _run(self, nodes: Sequence[Node], dot: Any, scopes: list[dict[str, Any]], out: list[str]) -> None:
        for node in nodes:
            if node.kind == "text":
                out.append(node.text)
            elif node.kind == "action":
                value = self._pipe(node.pipe, dot, scopes)
                if node.decl:
                    self._bind(node, scopes, value)
                else:
                    out.append(_fmt(value))
            elif node.kind == "if":
                value = self._pipe(node.pipe, dot, scopes)
                self._run(node.body if _truth(value) else node.orelse, dot, [*scopes, {}], out)
            elif node.kind == "with":
                value = self._pipe(node.pipe, dot, scopes)
                if _truth(value):
                    self._run(node.body, value, [*scopes, {}], out)
                else:
                    self._run(node.orelse, dot, [*scopes, {}], out)
            else:
                self._range(node, dot, scopes, out)

    def _range(self, node: Node, dot: Any, scopes: list[dict[str, Any]], out: list[str]) -> None:
        value = self._pipe(node.pipe, dot, scopes)
        if isinstance(value, Mapping):
            pairs = [(k, value[k]) for k in sorted(value)]
        elif isinstance(value, list | tuple):
            pairs = list(enumerate(value))
        elif isinstance(value, int):
            pairs = [(i, i) for i in range(value)]
        elif value is None:
            pairs = []
        else:
            raise TemplateError(f"range can't iterate over {_fmt(value)}")
        if not pairs:
            self._run(node.orelse, dot, [*scopes, {}], out)
        for key, item in pairs:
            scope: dict[str, Any] = {}
            if len(node.decl) == 2:
                scope[node.decl[0]], scope[node.decl[1]] = key, item
            elif node.decl:
                scope[node.decl[0]] = item
            self._run(node.body, item, [*scopes, scope], out)

    def _bind(self, node: Node, scopes: list[dict[str, Any]], value: Any) -> None:
        name = node.decl[0]
        if node.declare:
            scopes[-1][name] = value
            return
        for scope in reversed(scopes):
            if name in scope:
                scope[name] = value
                return
        raise TemplateError(f"undefined variable: {name}")

    def _pipe(self, commands: list[Any], dot: Any, scopes: list[dict[str, Any]]) -> Any:
        value: Any = None
        for n, cmd in enumerate(commands):
            args = [self._operand(op, dot, scopes) for op in cmd[1:]] if cmd[0][0] == "func" else []
            if n:
                args.append(value)
            if cmd[0][0] == "func":
                try:
                    value = _FUNCS[cmd[0][1]](*args)
                except TemplateError:
                    raise
                except Exception as e:
                    raise TemplateError(f"error calling {cmd[0][1]}: {e}") from e
            elif n:
                raise TemplateError("only functions can follow '|'")
            else:
                value = self._operand(cmd[0], dot, scopes)
        return value

    def _operand(self, op: Any, dot: Any, scopes: list[dict[str, Any]]) -> Any:
        kind = op[0]
        if kind == "lit":
            return op[1]
        if kind == "func":
            return self._pipe([[op]], dot, scopes)
        if kind == "pipe":
            return self._pipe(op[1], dot, scopes)
        if kind == "chain":
            return _fields(self._operand(op[1], dot, scopes), op[2])
        if kind == "field":
            return dot if op[1] == "." else _fields(dot, op[1][1:].split("."))
        name, *path = op[1].split(".")
        for scope in reversed(scopes):
            if name in scope:
                return _fields(scope[name], path)
        raise TemplateError(f"undefined variable: {name}")


def _fields(value: Any, path: list[str]) -> Any:
    for name in path:
        if isinstance(value, Struct):
            if name not in value:
                raise TemplateError(f"can't evaluate field {name}: there is no such field")
            value = value[name]
        elif isinstance(value, Mapping):
            value = value.get(name)
        else:
            raise TemplateError(f"can't evaluate field {name} in {_fmt(value)}")
    return value


def compile_template(text: str, what: str, sample: Struct) -> Template:
    """Compile ``text`` and render it once with ``sample``, so unknown fields fail at load naming ``what``."""
    try:
        template = Template(text)
        template.render(sample)
    except TemplateError as e:
        raise TemplateError(f"{what}: {e}") from e
    return template
