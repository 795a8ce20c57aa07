"""``--duty-file``: a duty cycle that another program changes while the load runs (the demo spreads its work so).

The file holds one number from 0 (idle) to 1 (busy all the time). It is looked at once per period, a stat, and
read again when it changed; a rewrite that cannot be read or is out of range keeps the last duty and says so once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from common.watched_file import WatchedFiles

from .errors import LoadError


def parse_duty(text: str, source: str) -> float:
    try:
        duty = float(text.strip())
    except ValueError:
        raise LoadError(f"{source}: expected a duty from 0 to 1, got {text.strip()[:40]!r}") from None
    if not 0.0 <= duty <= 1.0:
        raise LoadError(f"{source}: expected a duty from 0 to 1, got {duty:g}")
    return duty


class DutyFile:
    """Called once per period: the duty the file says now."""

    def __init__(self, path: Path, warnings: TextIO = sys.stderr) -> None:
        self._path = path
        self._warnings = warnings
        self._file = WatchedFiles(path)
        self._duty = self._read()  # unreadable at start: a LoadError before any work

    def _read(self) -> float:
        try:
            text = self._path.read_text(encoding="utf-8")
        except OSError as e:
            raise LoadError(f"duty file {self._path} cannot be read: {e.strerror or e}") from None
        return parse_duty(text, str(self._path))

    def __call__(self) -> float:
        if self._file.changed():
            try:
                self._duty = self._read()
            except LoadError as e:
                self._warnings.write(f"gpuscale-load: {e}; keeping duty {self._duty:g}\n")
        return self._duty
