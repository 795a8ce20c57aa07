"""Parsing the Go-template subset (see ``adapter.templates``) into nodes: text, actions, if/range/with blocks.

A pipeline is a list of commands; a command is a list of operands whose first may be a function name. Operands are
tuples: ("lit", value), ("field", ".A.B"), ("var", "$x.A"), ("func", name), ("pipe", commands), ("chain", op, path).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from adapter.errors import TemplateError

FUNCTIONS = frozenset(
    ["index", "len", "not", "and", "or", "eq", "ne", "lt", "le", "gt", "ge", "print", "println", "printf"]
)

_TOKEN = re.compile(
    r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<raw>`[^`]*`)|(?P<number>-?\d+(?:\.\d+)?)"""
    r"""|(?P<declare>:=)|(?P<assign>=)|(?P<punct>[()|,])|(?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"""
    r"""|(?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*))"""
)


@dataclass
class Node:
    kind: str  # text, action, if, range, with
    text: str = ""
    pipe: list[Any] = field(default_factory=list)
    decl: list[str] = field(default_factory=list)
    declare: bool = True
    body: list[Node] = field(default_factory=list)
    orelse: list[Node] = field(default_factory=list)


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


class Compiler:
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

    def compile(self) -> list[Node]:
        nodes, stop = self.block()
        if stop is not None:
            raise TemplateError(f"unexpected <<{stop}>>")
        return nodes

    def block(self) -> tuple[list[Node], str | None]:
        nodes: list[Node] = []
        while self.pos < len(self.items):
            kind, text = self.items[self.pos]
            self.pos += 1
            if kind == "text":
                if text:
                    nodes.append(Node("text", text=text))
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
                nodes.append(Node("action", pipe=pipe, decl=decl, declare=declare))
        return nodes, None

    def control(self, word: str, rest: str) -> Node:
        decl, declare, pipe = self.declaration(_lex_action(rest), allow_two=word == "range")
        node = Node(word, pipe=pipe, decl=decl, declare=declare)
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
                elif text in FUNCTIONS:
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
