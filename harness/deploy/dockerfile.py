"""Reading the Dockerfile and .dockerignore without Docker: instructions by stage, and which files the build context
holds (the rules of Docker's .dockerignore: ``*``, ``?`` and ``**`` patterns, a pattern also matches everything under
a directory it matches, ``!`` re-includes, the last matching pattern wins)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    keyword: str
    flags: dict[str, str]
    args: list[str]
    line: int


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


@dataclass
class Dockerfile:
    args: dict[str, str]  # ARGs before the first FROM, with their defaults
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        found = [s for s in self.stages if s.name == name]
        assert len(found) == 1, f"no single stage {name}"
        return found[0]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        out.append((start, pending + stripped))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def _split(rest: str) -> tuple[dict[str, str], list[str]]:
    if rest.startswith("["):
        return {}, list(json.loads(rest))
    words = shlex.split(rest, posix=True)
    flags = {}
    while words and words[0].startswith("--"):
        key, _, value = words.pop(0)[2:].partition("=")
        flags[key] = value
    return flags, words


def _substitute(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), m.group(0)), text)


def parse(path: Path) -> Dockerfile:
    result = Dockerfile({}, [])
    for line, text in _logical_lines(path.read_text()):
        keyword, _, rest = text.partition(" ")
        keyword = keyword.upper()
        flags, args = _split(rest.strip())
        if keyword == "ARG" and not result.stages:
            arg, _, default = args[0].partition("=")
            result.args[arg] = default
        elif keyword == "FROM":
            image = _substitute(args[0], result.args)
            stage = args[2] if len(args) == 3 and args[1].upper() == "AS" else None
            result.stages.append(Stage(image, stage))
        else:
            assert result.stages, f"line {line}: {keyword} before FROM"
            result.stages[-1].instructions.append(Instruction(keyword, flags, args, line))
    return result


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        ch = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                i += 1
                out += "(.*/)?"
            else:
                out += ".*"
            continue
        if ch == "*":
            out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "[":
            end = pattern.index("]", i)
            out += pattern[i : end + 1]
            i = end
        else:
            out += re.escape(ch)
        i += 1
    return re.compile(f"^{out}$")


@dataclass(frozen=True)
class DockerIgnore:
    patterns: tuple[tuple[re.Pattern[str], bool], ...]  # (pattern, re-include)

    @classmethod
    def read(cls, path: Path) -> DockerIgnore:
        patterns = []
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            include = line.startswith("!")
            text = line.lstrip("!").strip().strip("/")
            patterns.append((_pattern_regex(text), include))
        return cls(tuple(patterns))

    def in_context(self, relative: str) -> bool:
        parts = relative.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        kept = True
        for regex, include in self.patterns:
            if any(regex.match(p) for p in prefixes):
                kept = include
        return kept
