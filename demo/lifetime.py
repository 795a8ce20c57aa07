"""How a run ends when it is asked to: SIGTERM and SIGHUP stop it as Ctrl-C does, and what a killed run left behind
is removed by the next.

Ctrl-C is asyncio's: it cancels the run, whose ``finally`` blocks and ``async with`` exits stop every process and
remove the temporary directory. ``kill``, ``timeout make run``, a CI runner stopping a job and a closed terminal send
SIGTERM or SIGHUP instead, whose default is to end at once and leave all of it behind: here they cancel the run the
same way. A SIGKILL cannot be caught: the children die with the demo anyway (harness/parent_death.py), and the
temporary directory, which names its owner's pid in ``OWNER``, is removed by the next run once that pid is gone.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

PREFIX = "gpuscale-demo-"
OWNER = "owner.pid"  # in the temporary directory: the pid of the run that made it
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

T = TypeVar("T")


class Stopped(Exception):
    """The run was cancelled by ``signum`` and has stopped everything it started."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


async def stoppable(run: Coroutine[Any, Any, T]) -> T:
    """``run``'s result; a SIGTERM or a SIGHUP cancels it, and once it has cleaned up, raises Stopped."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(run)
    received: list[int] = []

    def stop(signum: int) -> None:
        # the first one cancels; a second does not cancel the cleanup the first started (it takes seconds at most)
        if not received:
            task.cancel()
        received.append(signum)

    # a signal ignored when the demo started (``nohup make run``) stays ignored: whoever started it chose so
    caught = {signum: before for signum in STOP_SIGNALS if (before := signal.getsignal(signum)) != signal.SIG_IGN}
    for signum in caught:
        loop.add_signal_handler(signum, stop, signum)
    try:
        return await task
    except asyncio.CancelledError:
        if received and task.cancelled():
            raise Stopped(received[0]) from None
        raise
    finally:
        for signum, before in caught.items():
            loop.remove_signal_handler(signum)
            if before is not None:  # None: a handler installed outside Python, which cannot be put back
                signal.signal(signum, before)


def owner_gone(directory: Path) -> bool:
    """Whether ``directory`` names, in ``OWNER``, a process that no longer runs (False when it names none)."""
    try:
        pid = int((directory / OWNER).read_text())
    except (OSError, ValueError):
        return False  # made by a run before OWNER existed, or one still writing it: not known to be stale
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # someone else's process
    return False


def remove_stale(parent: Path) -> list[Path]:
    """Remove the demo's temporary directories in ``parent`` whose run is gone; the ones removed."""
    removed = []
    for directory in sorted(parent.glob(f"{PREFIX}*")):
        if directory.is_dir() and owner_gone(directory):
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed


def make_workdir(parent: Path | None = None) -> Path:
    """A new temporary directory that names this process as its owner."""
    workdir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    (workdir / OWNER).write_text(f"{os.getpid()}\n")
    return workdir
