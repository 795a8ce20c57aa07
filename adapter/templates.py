"""The part of Go's text/template that prometheus-adapter rules use, with its ``<<`` ``>>`` delimiters.

Supported: text; ``<<.Field>>`` and ``<<.Map.key>>`` chains; variables (``$``, ``$x := ...``, ``$x = ...``);
string, raw-string, number and boolean literals; parenthesised pipelines and ``|`` pipes; ``if``/``else
if``/``else``, ``range`` (with ``$i, $v :=`` and ``else``), ``with``; trim markers ``<<-`` ``->>``; ``<</*
comments */>>``; the functions ``index len not and or eq ne lt le gt ge print printf println``. Anything else
is a compile error, raised when the rules are loaded, never while answering a request.

Data is given as ``Struct`` (a Go struct: an unknown field is an error) or plain dicts and lists (Go maps and
slices: a missing key gives the zero value)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from adapter.promql import quote


class TemplateError(ValueError):
    """A template that does not compile, or that cannot render with the data given."""


class Struct(dict[str, Any]):
    """A Go struct: fields looked up by name, and an unknown one is an error."""


_TOKEN = re.compile(
    r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<raw>`[^`]*`)|(?P<number>-?\d+(?:\.\d+)?)"""
    r"""|(?P<declare>:=)|(?P<assign>=)|(?P<punct>[()|,])|(?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"""
    r"""|(?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*))"""
)


@dataclass
class _Node:
    kind: str  # text, action, if, range, with
    text: str = ""
    pipe: list[Any] = field(default_factory=list)
    decl: list[str] = field(default_factory=list)
    declare: bool = True
    body: list[_Node] = field(default_factory=list)
    orelse: list[_Node] = field(default_factory=list)


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


def _lex_action(source: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(source):
        if source[pos:].strip() == "":
            break
        m = _TOKEN.match(source, pos)
        if not m or m.end() == pos:
            raise TemplateError(f"unexpected {source[pos:].strip()[:10]!r} in action <<{source}>>")
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


class _Compiler:
    def __init__(self, text: str) -> None:
        self.text = text
        self.items = self._split(text)
        self.pos = 0

    def _split(self, text: str) -> list[tuple[str, str]]:
        items: list[tuple[str, str]] = []
        pos = 0
        while True:
            start = text.find("<<", pos)
            if start < 0:
                items.append(("text", text[pos:]))
                return items
            end = start + 2
            while True:
                end = text.find(">>", end)
                if end < 0:
                    raise TemplateError(f"unclosed action starting at offset {start}")
                inside = text[start + 2 : end]
                if _balanced_quotes(inside):
                    break
                end += 2
            chunk = text[pos:start]
            action = text[start + 2 : end]
            if action.startswith("- "):
                chunk, action = chunk.rstrip(), action[2:]
            trim_after = action.endswith(" -")
            if trim_after:
                action = action[:-2]
            items.append(("text", chunk))
            items.append(("action", action.strip()))
            pos = end + 2
            if trim_after:
                while pos < len(text) and text[pos].isspace():
                    pos += 1

    def compile(self) -> list[_Node]:
        nodes, stop = self.block()
        if stop is not None:
            raise TemplateError(f"unexpected <<{stop}>>")
        return nodes

    def block(self) -> tuple[list[_Node], str | None]:
        nodes: list[_Node] = []
        while self.pos < len(self.items):
            kind, text = self.items[self.pos]
            self.pos += 1
            if kind == "text":
                if text:
                    nodes.append(_Node("text", text=text))
                continue
            if text.startswith("/*"):
                if not text.endswith("*/"):
                    raise TemplateError(f"unclosed comment <<{text}>>")
                continue
            word = text.split(None, 1)[0] if text else ""
            rest = text[len(word) :].strip()
            if word in ("end", "else"):
                return nodes, text
            if word in ("if", "with", "range"):
                nodes.append(self.control(word, rest))
            else:
                decl, declare, pipe = self.declaration(_lex_action(text), allow_two=False)
                nodes.append(_Node("action", pipe=pipe, decl=decl, declare=declare))
        return nodes, None

    def control(self, word: str, rest: str) -> _Node:
        decl, declare, pipe = self.declaration(_lex_action(rest), allow_two=word == "range")
        node = _Node(word, pipe=pipe, decl=decl, declare=declare)
        node.body, stop = self.block()
        if stop is None:
            raise TemplateError(f"missing <<end>> for <<{word} {rest}>>")
        if stop.startswith("else"):
            tail = stop[4:].strip()
            if tail.startswith("if ") and word == "if":
                node.orelse = [self.control("if", tail[3:])]
                return node
            if tail:
                raise TemplateError(f"unexpected <<{stop}>>")
            node.orelse, stop = self.block()
            if stop != "end":
                raise TemplateError(f"missing <<end>> for <<{word} {rest}>>")
        return node

    def declaration(self, tokens: list[tuple[str, str]], allow_two: bool) -> tuple[list[str], bool, list[Any]]:
        for op in ("declare", "assign"):
            at = next((i for i, t in enumerate(tokens) if t[0] == op), None)
            if at is None:
                continue
            names = [t[1] for t in tokens[:at] if t[0] == "var"]
            if len(names) != (at + 1) // 2 or not names or len(names) > (2 if allow_two else 1):
                raise TemplateError(f"bad variable declaration in {' '.join(t[1] for t in tokens)}")
            return names, op == "declare", self.pipeline(tokens[at + 1 :])
        return [], True, self.pipeline(tokens)

    def pipeline(self, tokens: list[tuple[str, str]]) -> list[Any]:
        if not tokens:
            raise TemplateError("missing value in action")
        commands: list[Any] = []
        current: list[Any] = []
        i = 0
        while i < len(tokens):
            kind, text = tokens[i]
            if kind == "punct" and text == "|":
                if not current:
                    raise TemplateError("missing command before '|'")
                commands.append(current)
                current = []
            elif kind == "punct" and text == "(":
                depth, j = 1, i + 1
                while j < len(tokens) and depth:
                    depth += {"(": 1, ")": -1}.get(tokens[j][1], 0) if tokens[j][0] == "punct" else 0
                    j += 1
                if depth:
                    raise TemplateError("unclosed '('")
                current.append(("pipe", self.pipeline(tokens[i + 1 : j - 1])))
                i = j
                if i < len(tokens) and tokens[i][0] == "field" and tokens[i][1] != ".":
                    current[-1] = ("chain", current[-1], tokens[i][1][1:].split("."))
                    i += 1
                continue
            elif kind == "ident":
                if text in ("true", "false"):
                    current.append(("lit", text == "true"))
                elif text == "nil":
                    current.append(("lit", None))
                elif text in _FUNCS:
                    current.append(("func", text))
                else:
                    raise TemplateError(f'function "{text}" not defined')
            elif kind == "string":
                current.append(("lit", _unquote(text)))
            elif kind == "raw":
                current.append(("lit", text[1:-1]))
            elif kind == "number":
                current.append(("lit", float(text) if "." in text else int(text)))
            elif kind in ("field", "var"):
                current.append((kind, text))
            else:
                raise TemplateError(f"unexpected {text!r}")
            i += 1
        if not current:
            raise TemplateError("missing command after '|'")
        commands.append(current)
        for cmd in commands:
            if cmd[0][0] != "func" and len(cmd) > 1:
                raise TemplateError("can't give arguments to a non-function")
        return commands


def _balanced_quotes(inside: str) -> bool:
    in_string = None
    i = 0
    while i < len(inside):
        c = inside[i]
        if in_string:
            if c == "\\" and in_string == '"':
                i += 1
            elif c == in_string:
                in_string = None
        elif c in '"`':
            in_string = c
        i += 1
    return in_string is None


def _unquote(literal: str) -> str:
    try:
        return literal[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError as e:
        raise TemplateError(f"bad string literal {literal}") from e


class Template:
    """A compiled template; ``render`` takes the data as a ``Struct``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._nodes = _Compiler(text).compile()

    def render(self, data: Any) -> str:
        out: list[str] = []
        self._run(self._nodes, data, [{"$": data}], out)
        return "".join(out)

    def _run(self, nodes: Sequence[_Node], dot: Any, scopes: list[dict[str, Any]], out: list[str]) -> None:
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

    def _range(self, node: _Node, dot: Any, scopes: list[dict[str, Any]], out: list[str]) -> None:
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

    def _bind(self, node: _Node, scopes: list[dict[str, Any]], value: Any) -> None:
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
