"""What the demo prints: lines, and on a terminal one progress line under them that says how much time is left.

Written to something that is not a terminal (a pipe, a file, a CI log) there is no progress line, only the lines.
"""

from __future__ import annotations

import shutil
from typing import TextIO

CLEAR = "\r\033[K"  # back to the start of the line and erase it


class Console:
    def __init__(self, stream: TextIO, seconds: float, bar: int = 20) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._seconds = seconds
        self._bar = bar
        self._status = ""

    def print(self, text: str = "") -> None:
        self._stream.write(f"{CLEAR if self._status else ''}{text}\n{self._status}")
        self._stream.flush()

    def progress(self, elapsed: float, note: str) -> None:
        if not self._tty:
            return
        done = min(1.0, elapsed / self._seconds) if self._seconds > 0 else 1.0
        filled = round(self._bar * done)
        line = f"[{'#' * filled}{'.' * (self._bar - filled)}] {max(0.0, self._seconds - elapsed):3.0f} s left  {note}"
        self._status = line[: shutil.get_terminal_size().columns - 1]  # one line: a wrapped one cannot be erased
        self._stream.write(CLEAR + self._status)
        self._stream.flush()

    def end(self) -> None:
        """Take the progress line away (before the last lines, or on Ctrl-C)."""
        if self._status:
            self._stream.write(CLEAR)
            self._stream.flush()
            self._status = ""
