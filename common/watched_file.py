"""Whether a file changed since it was last looked at: rules and counters files, CA bundles, certificates, tokens.

A file's identity is its inode, modification time and size. Kubernetes updates a mounted ConfigMap or Secret by
swapping a symlink; ``stat`` follows it, so the inode changes even when the time and size do not. A file that cannot
be read has no identity (None): its disappearance is a change, and so is its return.
"""

from __future__ import annotations

import os
from pathlib import Path

Stamp = tuple[int, int, int]


def stamp(path: Path | None) -> Stamp | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class WatchedFiles:
    """One or more files (None: not given), looked at together."""

    def __init__(self, *paths: Path | None) -> None:
        self.paths = paths
        self.stamps = [stamp(p) for p in paths]

    def changed(self) -> bool:
        """True when any file changed since the last look (or since construction)."""
        stamps = [stamp(p) for p in self.paths]
        if stamps == self.stamps:
            return False
        self.stamps = stamps
        return True
