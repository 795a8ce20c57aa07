"""Children that die with the process that started them, even when it is killed outright (SIGKILL, the OOM killer).

A SIGTERM or a Ctrl-C lets the demo stop what it started; a SIGKILL gives it no chance, and a collector, a
Prometheus and an adapter would go on running with nobody to stop them. On Linux the kernel can do it:
``prctl(PR_SET_PDEATHSIG, SIGKILL)`` in the child. It is set here by a small wrapper that the child runs first and
that then ``exec``s the real program (the setting survives ``exec``), rather than by ``preexec_fn``, which is not safe
in a process with threads (the demo has the kubelet stand-in's and the engines').

``python -I -S harness/parent_death.py PARENT_PID PROGRAM ARGS...``: the wrapper, run by its path in isolated mode so
that it works from any directory and starts in a few tens of milliseconds (only the standard library is imported).

Two caveats, both the kernel's:

- the signal follows the *thread* that forked the child, not the process: start children from the main thread (or
  a thread that outlives them), never from a worker thread that ends (``asyncio.to_thread``);
- a parent that died before the setting took effect is missed, so the wrapper checks that its parent is still
  ``PARENT_PID`` after setting it, and exits if not.

Elsewhere than Linux, ``guarded`` leaves the command as it is: the children are stopped only on a clean exit.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def guarded(args: Sequence[str]) -> list[str]:
    """``args`` run so that the program is killed when the calling thread of this process ends (Linux only)."""
    if not sys.platform.startswith("linux"):
        return list(args)
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid()), *args]


def main(argv: Sequence[str]) -> None:
    if len(argv) < 2:
        sys.exit("usage: parent_death.py PARENT_PID PROGRAM [ARGS...]")
    parent, program = int(argv[0]), list(argv[1:])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        sys.exit(f"parent_death: prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
    if os.getppid() != parent:  # the parent died before the setting above: nobody will stop this child
        sys.exit(f"parent_death: the parent {parent} is gone; not starting {program[0]}")
    os.execvp(program[0], program)


if __name__ == "__main__":
    main(sys.argv[1:])
