"""How the demo ends when it is stopped: Ctrl-C, SIGTERM (``kill``, ``timeout make run``, a CI runner stopping a job)
and SIGHUP stop every process it started and remove its temporary directory; a SIGKILL takes its children with it,
and the next run removes the directory it left."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from demo import lifetime
from harness.demo_process import LOOP_RUNS, alive, demo, read_until, running, workdir_of
from harness.parent_death import guarded


def gone_within(pids: set[int], within: float = 30.0) -> list[int]:
    """Those of ``pids`` still alive once all are gone or ``within`` seconds have passed."""
    deadline = time.monotonic() + within
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code", "said"), [(signal.SIGINT, 130, "stopped:"),
                                                      (signal.SIGTERM, 143, "stopped by SIGTERM:")])  # fmt: skip
def test_a_stop_signal_stops_every_process_and_removes_the_temporary_files(
    tmp_path: Path, signum: int, code: int, said: str
) -> None:
    children: set[int] = set()
    with demo(tmp_path) as process:
        lines = read_until(process, LOOP_RUNS, children)
        process.send_signal(signum)
        out, _ = process.communicate(timeout=60)
    assert process.returncode == code, out
    assert f"{said} every process the demo started has stopped" in out
    assert "Traceback" not in out
    assert not workdir_of(lines).exists()
    assert len(children) >= 3
    assert not [pid for pid in children if alive(pid)]
    assert not (tmp_path / "demo.png").exists()


@pytest.mark.prometheus
@pytest.mark.slow
def test_make_run_passes_its_args_and_a_sigterm_to_make_stops_the_demo(tmp_path: Path) -> None:
    """``kill`` of make's pid: make passes the SIGTERM on to the demo, its child, which stops what it started."""
    children: set[int] = set()
    with running(["make", "--no-print-directory", "run", f"ARGS=--png {tmp_path / 'make.png'} --seconds 60"]) as make:
        lines = read_until(make, LOOP_RUNS, children)
        make.send_signal(signal.SIGTERM)
        out, _ = make.communicate(timeout=60)
    assert "stopped by SIGTERM: every process the demo started has stopped" in out, out
    assert make.returncode != 0
    assert "scale-down 9.6 s" in "\n".join(lines)  # ARGS reached the demo: 12 s of 75 is 9.6 s of 60
    assert not workdir_of(lines).exists()
    assert len(children) >= 4  # the demo, and under it the collector, Prometheus, the adapter
    assert not [pid for pid in children if alive(pid)]


@pytest.mark.prometheus
@pytest.mark.slow
def test_after_a_sigkill_the_children_die_too_and_the_next_run_removes_the_directory(tmp_path: Path) -> None:
    children: set[int] = set()
    with demo(tmp_path) as process:
        lines = read_until(process, LOOP_RUNS, children)
        process.kill()
        process.wait()
        assert len(children) >= 3
        assert gone_within(children) == []  # before the group is killed on leaving: the kernel did it
    workdir = workdir_of(lines)
    assert workdir.parent == tmp_path
    assert workdir.is_dir()  # nobody could remove it
    assert lifetime.remove_stale(tmp_path) == [workdir]
    assert not workdir.exists()


def test_only_the_directories_of_runs_that_are_gone_are_removed(tmp_path: Path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = lifetime.make_workdir(tmp_path)
    (gone / lifetime.OWNER).write_text(ended.stdout)
    (gone / "prometheus").mkdir()
    running_now = lifetime.make_workdir(tmp_path)
    unknown = lifetime.make_workdir(tmp_path)
    (unknown / lifetime.OWNER).unlink()  # an older run's, or one still being made
    other = tmp_path / "something-else"
    other.mkdir()
    (other / lifetime.OWNER).write_text(ended.stdout)
    assert lifetime.remove_stale(tmp_path) == [gone]
    assert sorted(tmp_path.iterdir()) == sorted([running_now, unknown, other])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_cancel_the_run_which_cleans_up_before_it_ends(signum: int) -> None:
    cleaned: list[str] = []

    async def run() -> None:
        try:
            os.kill(os.getpid(), signum)
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0)  # the cleanup may await: the run is cancelled, not ended
            cleaned.append("yes")

    # at its default, whatever the test runner inherited: a runner started under nohup ignores SIGHUP, and an ignored
    # signal stays ignored (the next test)
    before = signal.signal(signum, signal.SIG_DFL)
    try:
        with pytest.raises(lifetime.Stopped) as stopped:
            asyncio.run(lifetime.stoppable(run()))
        assert stopped.value.signum == signum
        assert cleaned == ["yes"]
        assert signal.getsignal(signum) == signal.SIG_DFL  # the handlers are gone with the run
    finally:
        signal.signal(signum, before)


def test_a_signal_ignored_when_the_run_started_stays_ignored() -> None:
    """``nohup make run``: a hangup is not a reason to stop."""
    ended: list[str] = []

    async def run() -> None:
        os.kill(os.getpid(), signal.SIGHUP)
        await asyncio.sleep(0.1)  # long enough for a handler, had one been installed, to cancel this
        ended.append("by itself")

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        asyncio.run(lifetime.stoppable(run()))
    finally:
        signal.signal(signal.SIGHUP, before)
    assert ended == ["by itself"]


def test_a_child_started_guarded_dies_when_its_parent_is_killed() -> None:
    starter = (
        "import subprocess, sys, time\n"
        "from harness.parent_death import guarded\n"
        "child = subprocess.Popen(guarded(['sleep', '600']) if sys.argv[1] == 'guarded' else ['sleep', '600'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    left = {}
    for how in ("guarded", "plain"):
        with running([sys.executable, "-c", starter, how]) as parent:
            assert parent.stdout is not None
            child = int(parent.stdout.readline())
            parent.kill()
            parent.wait()
            left[how] = gone_within({child}, within=10 if how == "guarded" else 1)
        # leaving ``running`` killed the plain child with the group, as a failed test's would be
    assert left["guarded"] == []
    assert left["plain"] != []  # without the wrapper it outlives its parent: what the test tells apart
    assert guarded(["x"])[-1] == "x"
