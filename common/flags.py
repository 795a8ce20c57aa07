"""A component's command line as one table.

Each flag is declared once: its spellings, the settings field it fills, its parser (which checks the range), its
default as a user would write it, its help, and the environment variables that may give it. The table builds the
argparse parser and the help text, reads the environment (the flag wins, then our variable, then the variable of the
tool we replace), and gives the settings dataclasses their defaults, so no default is written twice.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Parser = Callable[[str], Any]


class FlagError(ValueError):
    """A flag or variable that cannot be used; the message names it and what is valid."""


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    help: str
    parse: Parser = str
    default: str | None = None  # written as a user writes it and parsed like a given value; None: unset
    field: str | None = None  # the settings field it fills; "section.name" for a nested dataclass
    env: tuple[str, ...] = ()  # further variables read after ours: the spelling of the tool it replaces
    switch: bool = False  # given alone it means true, as Go and dcgm-exporter booleans do
    repeated: bool = False  # may be given several times; the values reach the parser joined by newlines
    ignored: str = ""  # accepted for compatibility but without effect here: says why

    @property
    def long(self) -> str:
        return next(n for n in self.names if n.startswith("--"))[2:]


def usage_error(prog: str, problem: str) -> str:
    """What a program says of a command line it cannot run, on one line: the problem and where the flags are listed.
    The whole usage above it (argparse's way; 33 lines for the collector) would push the problem off the screen."""
    return f"{prog}: error: {problem} (see {prog} --help)"


def plain(doc: str | None) -> str:
    """A module docstring as help text: without the double backticks that mark code in it, which a terminal shows
    as they are."""
    return (doc or "").replace("``", "")


def package_version() -> str:
    """The installed distribution's version, which each program's ``--version`` prints."""
    # imported here: importlib.metadata brings email and zipfile, 2.7 MB resident in a collector that never asks
    from importlib import metadata

    try:
        return metadata.version("gpuscale")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class _Version(argparse.Action):
    """argparse's ``version`` action, the version read only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, prog: str = "", **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")
        self.prog = prog

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(f"{self.prog} version {package_version()}")  # on stdout, as argparse's own version action
        parser.exit()


def flag(*names: str, help: str, **options: Any) -> Flag:
    return Flag(names, help, **options)


def parsed_default(f: Flag) -> Any:
    return None if f.default is None else f.parse(f.default)


def defaults_of(flags: Sequence[Flag]) -> Callable[[str], Any]:
    """The parsed default of one of ``flags``, by its long name: what a settings dataclass's field starts as. A
    package declares the flags of its own settings and takes their defaults from them; the program's table joins
    every package's flags."""
    by_long = {f.long: f for f in flags}
    return lambda long: parsed_default(by_long[long])


class FlagTable:
    def __init__(
        self, prog: str, description: str, env_prefix: str, flags: Sequence[Flag], version: bool = False
    ) -> None:
        """``version``: ``-v``/``--version`` prints ``<prog> version <the installed version>`` and exits 0, as Go
        programs built with urfave/cli (dcgm-exporter) do; it has no environment variable."""
        self.prog = prog
        self.description = description
        self.env_prefix = env_prefix
        self.flags = {f.long: f for f in flags}
        self.version = version

    def env_names(self, f: Flag) -> tuple[str, ...]:
        return (self.env_prefix + f.long.upper().replace("-", "_"), *f.env)

    def default(self, long: str) -> Any:
        return parsed_default(self.flags[long])

    def describe(self, long: str) -> str:
        """``--flag (or VARIABLE, ...)``: how error messages name a setting."""
        return f"--{long} (or {', '.join(self.env_names(self.flags[long]))})"

    def fail(self, long: str, problem: str) -> FlagError:
        return FlagError(f"{self.describe(long)}: {problem}")

    def parser(self) -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(
            prog=self.prog, description=self.description, allow_abbrev=False, exit_on_error=False
        )
        if self.version:
            p.add_argument("-v", "--version", action=_Version, prog=self.prog)
        ignored = p.add_argument_group("accepted for compatibility, without effect here")
        for f in self.flags.values():
            variables = ", ".join(f"${n}" for n in self.env_names(f))
            shown = "" if f.default is None else f"; default {f.default}"
            text = argparse.SUPPRESS if f.ignored else f"{f.help} [env {variables}{shown}]"
            group = ignored if f.ignored else p
            options: dict[str, Any] = {"dest": f.long, "default": None, "help": text}
            if f.switch or f.ignored:  # a compatibility flag may come with or without a value
                options |= {"nargs": "?", "const": "true", "metavar": "BOOL" if f.switch else "VALUE"}
            elif f.repeated:
                options["action"] = "append"
            group.add_argument(*f.names, **options)
        return p

    def _given(self, f: Flag, flag_value: str | list[str] | None, env: Mapping[str, str]) -> tuple[str | None, str]:
        """The text given for ``f`` (None: not given) and how to name where it came from."""
        if isinstance(flag_value, list):
            return "\n".join(flag_value), self.describe(f.long)
        if flag_value is not None:
            return flag_value, self.describe(f.long)
        # an empty variable is one not set, as urfave/cli reads its numbers and booleans (a manifest's value: "")
        variable = next((n for n in self.env_names(f) if env.get(n)), None)
        if variable is None:
            return None, self.describe(f.long)
        return env[variable], f"environment variable {variable} (--{f.long})"

    def usage(self) -> str:
        return self.parser().format_help()

    def read(self, argv: Sequence[str], env: Mapping[str, str]) -> FlagValues:
        """Parsed values of every flag given (flag or variable) or defaulted; FlagError names the bad one."""
        try:
            given, rest = self.parser().parse_known_args(list(argv))
        except argparse.ArgumentError as e:
            raise FlagError(str(e)) from e
        if rest:
            raise FlagError(f"unknown flag or argument: {rest[0]}")
        values: dict[str, Any] = {}
        sources: set[str] = set()
        for long, f in self.flags.items():
            text, source = self._given(f, getattr(given, long), env)
            if text is not None:
                sources.add(long)
            else:
                text = f.default
            try:
                values[long] = None if text is None else f.parse(text)
            except ValueError as e:
                raise FlagError(f"{source}: {e}") from e
        return FlagValues(self, values, frozenset(sources))


class FlagValues:
    def __init__(self, table: FlagTable, values: dict[str, Any], given: frozenset[str]) -> None:
        self.table = table
        self.values = values
        self.given = given

    def __getitem__(self, long: str) -> Any:
        return self.values[long]

    def fail(self, long: str, problem: str) -> FlagError:
        return self.table.fail(long, problem)

    def fields(self, section: str = "") -> dict[str, Any]:
        """Keyword arguments for one settings dataclass: the flags whose field is in ``section`` ("" = top level)."""
        out = {}
        for long, f in self.table.flags.items():
            if f.field is None or f.ignored:
                continue
            owner, _, name = f.field.rpartition(".")
            if owner == section:
                out[name] = self.values[long]
        return out

    @property
    def ignored(self) -> tuple[str, ...]:
        """The flags given that have no effect here, as ``--long``."""
        return tuple(f"--{long}" for long, f in self.table.flags.items() if f.ignored and long in self.given)


# Value parsers. Each raises ValueError with a message that shows the bad value and what is valid.

_TRUE = ("1", "t", "true", "y", "yes", "on")
_FALSE = ("0", "f", "false", "n", "no", "off", "")


def boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE or lowered in _FALSE:
        return lowered in _TRUE
    raise ValueError(f"{text!r} is not a boolean (true or false)")


def integer(low: int, high: int) -> Parser:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number from {low} to {high}") from None
        if not low <= value <= high:
            raise ValueError(f"{value} is outside the valid range {low} to {high}")
        return value

    return parse


def milliseconds(low: int, high: int) -> Parser:
    """A whole number of milliseconds (dcgm-exporter's unit) in seconds."""
    whole = integer(low, high)
    return lambda text: whole(text) / 1000.0


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Go's duration syntax (``90s``, ``1m30s``, ``500ms``; ``0``) in seconds."""
    text = text.strip()
    if text == "0":
        return 0.0
    if not text or _DURATION_PART.sub("", text):
        raise ValueError(f"{text!r} is not a duration like 30s, 1m30s or 500ms")
    return sum(float(n) * _UNITS[u] for n, u in _DURATION_PART.findall(text))


def duration(low: float, high: float, shown: str) -> Parser:
    """A Go duration in seconds, from ``low`` to ``high`` (``shown`` says the range as a user writes it)."""

    def parse(text: str) -> float:
        seconds = parse_duration(text)
        if not low <= seconds <= high:
            raise ValueError(f"{text.strip()} is outside the valid range {shown}")
        return seconds

    return parse


def choice(*allowed: str) -> Parser:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"{text!r} is not one of {', '.join(allowed)}")
        return text

    return parse


def optional_text(text: str) -> str | None:
    return text or None


def optional_path(text: str) -> Path | None:
    return Path(text) if text else None


def string_list(text: str) -> tuple[str, ...]:
    """A Go string slice: comma-separated, the flag repeatable; given but empty means an empty list."""
    return tuple(part.strip() for part in re.split(r"[,\n]", text) if part.strip())
