"""Flag values as Kubernetes components write them (Go durations, booleans, comma-separated lists), read from parsed
flags or, when a flag is absent, from its ``GPUSCALE_ADAPTER_*`` environment variable."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapter.errors import ConfigError

ENV_PREFIX = "GPUSCALE_ADAPTER_"

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


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "t", "true", "yes", "y", "on"):
        return True
    if lowered in ("0", "f", "false", "no", "n", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true or false)")


def dest(flag: str) -> str:
    return flag.replace("-", "_")


def env_name(flag: str) -> str:
    return ENV_PREFIX + dest(flag).upper()


class FlagValues:
    """Typed, checked access to parsed flags; every error names the flag, its variable and the valid values."""

    def __init__(self, values: Mapping[str, Any], env: Mapping[str, str]) -> None:
        self.values = values
        self.env = env

    def given(self, flag: str) -> bool:
        return self.values.get(dest(flag)) is not None or env_name(flag) in self.env

    def get(self, flag: str, default: str | None = None) -> str | None:
        value = self.values.get(dest(flag))
        if isinstance(value, list):
            value = ",".join(value)
        if value is None:
            value = self.env.get(env_name(flag))
        return default if value is None else str(value)

    def fail(self, flag: str, problem: str) -> ConfigError:
        return ConfigError(f"--{flag} (or {env_name(flag)}): {problem}")

    def duration(self, flag: str, default: str, low: float, high: float, shown: str) -> float:
        text = self.get(flag, default) or default
        try:
            seconds = parse_duration(text)
        except ValueError as e:
            raise self.fail(flag, str(e)) from e
        if not low <= seconds <= high:
            raise self.fail(flag, f"{text} is outside the valid range {shown}")
        return seconds

    def boolean(self, flag: str) -> bool:
        text = self.get(flag, "false") or "false"
        try:
            return parse_bool(text)
        except ValueError as e:
            raise self.fail(flag, str(e)) from e

    def path(self, flag: str) -> Path | None:
        text = self.get(flag)
        return Path(text) if text else None

    def strings(self, flag: str, default: tuple[str, ...]) -> tuple[str, ...]:
        """A Go string slice: comma-separated, the flag repeatable; given but empty means an empty list."""
        text = self.get(flag)
        if text is None:
            return default
        return tuple(part.strip() for part in text.split(",") if part.strip())
