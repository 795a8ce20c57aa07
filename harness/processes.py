"""Servers the tests, the benchmarks and the demo start as plain processes: a free port, and a process waited for
until it answers. Nothing here needs more than the standard library, so a benchmark on a GPU machine that carries only
the project's runtime can use it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from harness.parent_death import guarded

# Sets up the process it runs in, then becomes the program: what ``preexec_fn`` would do, without running Python
# between fork and exec in a parent with threads (gRPC's fork handlers there once killed a child before its exec).
_SET_UP_THEN_EXEC = """
import os, signal, sys
cpus, sigint, *program = sys.argv[1:]
if cpus:
    os.sched_setaffinity(0, {int(cpu) for cpu in cpus.split(",")})
if sigint == "default":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(program[0], program)
"""


def launched(args: Sequence[str], cpus: set[int] | None = None, sigint_default: bool = False) -> list[str]:
    """``args`` started on ``cpus`` only (all if None), and with SIGINT at its default action if ``sigint_default``
    (a parent run in the background by a shell ignores SIGINT, and its children inherit that)."""
    placed = ",".join(str(cpu) for cpu in sorted(cpus or ()))
    sigint = "default" if sigint_default else "inherit"
    return [sys.executable, "-I", "-S", "-c", _SET_UP_THEN_EXEC, placed, sigint, *args]


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
