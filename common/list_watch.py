"""LIST, then WATCH from the list's resourceVersion, forever: the one loop behind every copy of Kubernetes objects.

The caller supplies the two halves and applies what they return itself: ``list_once`` lists and applies the
listing, returning its resourceVersion; ``watch_from(version)`` applies each event as it arrives and yields the
version it carried ("" for none). The loop decides what happens between them, as client-go's reflector does:

- a watch that ends normally (the server's timeout) is resumed from the last version, without a LIST;
- a watch that ends at once with nothing in it is retried after a back-off, so a server or proxy that closes
  watches immediately is not asked again in a tight loop;
- a version the server no longer has (410 Gone) means LIST again; twice in a row, after a back-off;
- any other failure, a malformed answer included, is reported, backed off and followed by a fresh LIST.

Back-off (``common/backoff.py``) doubles from 1 s to ``max_backoff`` with up to 20 % jitter, so many replicas do not
retry in step, and returns to 1 s only after a watch that worked (delivered events, or stayed open its full second):
a LIST that succeeds before every watch fails again does not reset it. Only cancellation ends the loop.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal

from common.backoff import Backoff

# why a watch ended: closed by the server, its version expired (410), or something failed
Restart = Literal["closed", "expired", "error"]

MIN_WATCH_SECONDS = 1.0


async def list_watch(
    list_once: Callable[[], Awaitable[str]],
    watch_from: Callable[[str], AsyncIterator[str]],
    expired: Callable[[BaseException], bool],
    on_restart: Callable[[Restart, BaseException | None], None] = lambda _why, _error: None,
    max_backoff: float = 30.0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    jitter: Callable[[], float] = random.random,
) -> None:
    """Run until cancelled; ``on_restart`` hears of every restart (and may log or count it)."""
    version, expired_in_a_row = "", 0
    backoff = Backoff(1.0, max_backoff, jitter)

    async def back_off() -> None:
        await sleep(backoff.next())

    while True:
        try:
            if not version:
                version = await list_once()
            started, events = clock(), 0
            async for new_version in watch_from(version):
                version = new_version or version
                events += 1
            expired_in_a_row = 0
            on_restart("closed", None)
            if events == 0 and clock() - started < MIN_WATCH_SECONDS:
                await back_off()
            else:
                backoff.reset()  # the watch worked: progress, not a failure streak
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a failure of any kind must not end the loop: the copy would go stale unseen
            version = ""
            if expired(e):
                on_restart("expired", e)
                expired_in_a_row += 1
                if expired_in_a_row > 1:  # a server that expires every version would be listed in a tight loop
                    await back_off()
                continue
            expired_in_a_row = 0
            on_restart("error", e)
            await back_off()
