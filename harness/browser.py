"""A real browser for the tests: Debian's Chromium, headless, started once per page as a plain process."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path


def chromium_binary() -> str:
    """``$CHROMIUM_BINARY``, else ``chromium`` on the PATH; a clear failure, never a skip, without."""
    path = os.environ.get("CHROMIUM_BINARY") or shutil.which("chromium")
    if path is None:
        raise RuntimeError(
            "chromium is not installed; run scripts/ensure-chromium "
            "(apt-get install -y --no-install-recommends chromium)"
        )
    return path


def dom_after_load(page: Path, width: int, height: int, within: float = 60.0) -> str:
    """The DOM as Chromium holds it once ``page`` has loaded and its scripts have run, in a window of ``width`` x
    ``height`` CSS pixels (``--dump-dom``: what the page's scripts wrote into it, after layout)."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        done = subprocess.run(
            [
                chromium_binary(),
                "--headless",
                # the tests run as root, where Chromium's sandbox does not start; the pages are the tests' own
                "--no-sandbox",
                f"--user-data-dir={profile}",  # a profile of its own: runs side by side, nothing left in $HOME
                f"--window-size={width},{height}",
                # the load event and what its handlers do happen within this much virtual time, then the dump
                "--virtual-time-budget=10000",
                "--dump-dom",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=within,
            check=False,
        )
    if done.returncode != 0 or not done.stdout:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout
