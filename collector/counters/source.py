"""Where the counters come from: a file (``-f``, dcgm-exporter's default path, the built-in file) or a ConfigMap.

The collection asks a source for the parsed counters at start and again whenever ``changed()`` says so (and on
SIGHUP); a source that cannot give them raises ``ConfigError`` and the previous configuration stays.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from collector.counters import file as counters
from collector.counters.file import Counters
from common.watched_file import WatchedFiles

log = logging.getLogger(__name__)

# What dcgm-exporter reads without -f; its image ships the file there, and Helm values mount users' files there.
DCGM_EXPORTER_DEFAULT = "/etc/dcgm-exporter/default-counters.csv"


class CountersSource(Protocol):
    description: str

    def load(self) -> Counters:
        """The counters as they are now; ``ConfigError`` names what is wrong."""
        ...

    def changed(self) -> bool:
        """Whether ``load`` may give something new since the last call."""
        ...


class CountersFile:
    """A counters file, reloaded when it changes; ``None``: the file shipped with the package for the release
    ``names`` (``--dcgm-names``)."""

    def __init__(self, path: str | None, names: str = "4.10") -> None:
        self.path = path
        self.names = names
        self.description = path or f"<built-in {counters.DEFAULT_FILES[names]}>"
        self._file = WatchedFiles(Path(path) if path else None)  # a ConfigMap update swaps a symlink: new inode

    def load(self) -> Counters:
        return counters.load(self.path, self.names)

    def changed(self) -> bool:
        return self._file.changed()


class InlineCounters:
    """The counters a YAML configuration file lists itself (``metrics.fields``), read at start as there."""

    def __init__(self, text: str, config_file: str) -> None:
        self.text = text
        self.description = f"{config_file} (metrics.fields)"

    def load(self) -> Counters:
        return counters.parse(self.text, self.description)

    def changed(self) -> bool:
        return False


def counters_file(given: str | None, default: str = DCGM_EXPORTER_DEFAULT, names: str = "4.10") -> CountersFile:
    """``-f``'s file; without it, dcgm-exporter's default path when a file is there, else the built-in file of the
    release ``names``."""
    if given is not None:
        return CountersFile(given)
    if Path(default).is_file():
        log.info("counters from %s (dcgm-exporter's default path; -f not given)", default)
        return CountersFile(default)
    return CountersFile(None, names)
