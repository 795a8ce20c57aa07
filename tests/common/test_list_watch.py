"""The one LIST-then-WATCH loop (common/list_watch.py), driven by scripted lists and watches."""

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from common.list_watch import Restart, list_watch


class Gone(Exception):
    """Stands for a 410: the caller tells the loop which of its errors mean that."""


class Script:
    """Lists and watches answering from queues; each entry is a version, a list of versions, or an exception."""

    def __init__(self, lists: list[str | Exception], watches: list[list[str | Exception]]) -> None:
        self.lists, self.watches = lists, watches
        self.calls: list[str] = []
        self.restarts: list[Restart] = []
        self.sleeps: list[float] = []
        self.done = asyncio.Event()

    async def list_once(self) -> str:
        self.calls.append("list")
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def watch_from(self, version: str) -> AsyncIterator[str]:
        self.calls.append(f"watch@{version}")
        if not self.watches:
            self.done.set()
            await asyncio.Event().wait()  # nothing left to say: stay open until cancelled
        for event in self.watches.pop(0):
            if isinstance(event, Exception):
                raise event
            yield event

    def restarted(self, why: Restart, error: BaseException | None) -> None:
        self.restarts.append(why)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0)  # a loop that never stops retrying still lets the test's timeout run


async def run(script: Script, jitter: float = 0.0, clock: float = 0.0) -> None:
    task = asyncio.create_task(
        list_watch(
            script.list_once,
            script.watch_from,
            lambda e: isinstance(e, Gone),
            script.restarted,
            max_backoff=8.0,
            sleep=script.sleep,
            clock=lambda: clock,
            jitter=lambda: jitter,
        )
    )
    try:
        await asyncio.wait_for(script.done.wait(), 5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_closed_watch_resumes_from_the_last_version_without_listing() -> None:
    script = Script(["10"], [["11", "", "12"], ["13"]])  # "" is an event without a version (kept: 11)
    await run(script)
    assert script.calls == ["list", "watch@10", "watch@12", "watch@13"]
    assert script.restarts == ["closed", "closed"]
    assert script.sleeps == []


async def test_watches_that_end_at_once_empty_back_off_doubling_to_the_cap() -> None:
    script = Script(["10"], [[]] * 5)
    await run(script)
    assert script.sleeps == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert script.calls.count("list") == 1


async def test_a_410_lists_again_at_once_and_twice_in_a_row_after_a_back_off() -> None:
    script = Script(["10", "20", "30", "40"], [[Gone()], [Gone()], [Gone()], ["41"]])
    await run(script)
    assert script.calls == ["list", "watch@10", "list", "watch@20", "list", "watch@30", "list", "watch@40", "watch@41"]
    assert script.restarts == ["expired", "expired", "expired", "closed"]
    assert script.sleeps == [1.0, 2.0]  # the first 410 costs nothing; repeated ones back off, growing


async def test_any_failure_backs_off_and_lists_again_and_the_loop_survives_it() -> None:
    # a list that fails, a malformed event (TypeError from the caller's parsing), an oversized line
    script = Script([ConnectionError("refused"), "10", "20"], [[TypeError("labels is a string")], ["21"]])
    await run(script)
    assert script.restarts == ["error", "error", "closed"]
    assert script.calls == ["list", "list", "watch@10", "list", "watch@20", "watch@21"]
    assert script.sleeps == [1.0, 2.0]  # a LIST that works between failures does not reset the back-off


@pytest.mark.parametrize(("jitter", "expected"), [(0.0, 1.0), (0.5, 1.1), (1.0, 1.2)])
async def test_back_off_carries_up_to_a_fifth_of_jitter(jitter: float, expected: float) -> None:
    script = Script(["10"], [[]])
    await run(script, jitter=jitter)
    assert script.sleeps == [pytest.approx(expected)]


async def test_a_server_that_expires_every_version_is_not_listed_in_a_tight_loop() -> None:
    # each LIST works and each watch from its version answers 410 at once
    script = Script([str(v) for v in range(10, 18)], [[Gone()]] * 7)
    await run(script)
    assert script.sleeps == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
