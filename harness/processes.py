"""Servers the tests, the benchmarks and the demo start as plain processes: a free port, and a process waited for
until it answers. Nothing here needs more than the standard library, so a benchmark on a GPU machine that carries only
the project's runtime can use it."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.parent_death import guarded


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server_process(
    what: str,
    args: list[str],
    log: Path,
    ready_url: str,
    cwd: Path | None = None,
    within: float = 30.0,
    die_with_parent: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    """``args`` running in ``cwd`` with its output in ``log``, once ``ready_url`` answers 200 (within ``within``
    seconds); stopped on exit. ``die_with_parent``: killed too if this process is (harness/parent_death.py; only
    from a thread that outlives the server)."""
    with log.open("wb") as out:
        command = guarded(args) if die_with_parent else args
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + within
        while True:
            try:
                with urllib.request.urlopen(ready_url, timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes], within: float = 10.0) -> None:
    """SIGTERM, and SIGKILL if ``process`` has not ended ``within`` seconds later."""
    process.terminate()
    try:
        process.wait(timeout=within)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
