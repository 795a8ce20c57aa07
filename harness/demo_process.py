"""The demo program as the tests start it (in a process group of its own), and what they look at once it ended.

Each run gets its own process group, with SIGINT at its default: a test runner started with SIGINT ignored (any
background job of a non-interactive shell, ``cmd &``) passes that on to every child, Python then installs no
KeyboardInterrupt handler, and a Ctrl-C would do nothing (subprocess's ``restore_signals`` restores only SIGPIPE,
SIGXFZ and SIGXFSZ). Leaving a run kills whatever is left of its group and reaps the demo, so that a failed test
leaves no process behind to break the next one.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from harness.processes import launched

ROOT = Path(__file__).resolve().parents[1]
LOOP_RUNS = r"^\s+\d+s\s+1 "  # a line of the table: the chain is up and the loop runs


def children_of(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` now (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def descendants_of(pid: int) -> set[int]:
    """``pid``'s children, their children, and so on."""
    found: set[int] = set()
    parents = {pid}
    while parents:
        children = set().union(*(children_of(p) for p in parents)) - found
        found |= children
        parents = children
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@contextlib.contextmanager
def running(command: Sequence[str], env: Mapping[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """``command`` in the repository, in a process group of its own, its output (stderr too) in one pipe; ``env``
    added to the environment."""
    process = subprocess.Popen(
        launched(command, sigint_default=True), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, process_group=0,
    )  # fmt: skip
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the group outlives its leader while any member runs
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def demo(tmp_path: Path, *args: str) -> contextlib.AbstractContextManager[subprocess.Popen[str]]:
    """``python -m demo``, which ``make run`` runs, its picture and its temporary directory in ``tmp_path`` (so that
    what one test leaves, or removes as stale, is its own)."""
    command = [sys.executable, "-m", "demo", "--png", str(tmp_path / "demo.png"), *args]
    return running(command, env={"TMPDIR": str(tmp_path)})


def read_until(process: subprocess.Popen[str], pattern: str, children: set[int], within: float = 90) -> list[str]:
    """Lines up to one matching ``pattern``, noting the processes under ``process`` on the way."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + within
    while not lines or not re.search(pattern, lines[-1]):
        assert time.monotonic() < deadline, f"no line like {pattern!r}: {lines}"
        line = process.stdout.readline()
        assert line, f"the demo ended before {pattern!r}: {lines}"
        lines.append(line.rstrip("\n"))
        children |= descendants_of(process.pid)
    return lines


def workdir_of(lines: Sequence[str]) -> Path:
    """The temporary directory the demo named on its first line."""
    found = next((m for line in lines if (m := re.search(r"\((/[^)]*gpuscale-demo-[^)]*)\)", line))), None)
    assert found is not None, lines
    return Path(found[1])
