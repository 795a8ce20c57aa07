"""Waiting on other processes and sockets by polling them: there is no event to await across a process."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def wait_until(check: Callable[[], bool], within: float = 10.0, what: str = "condition") -> None:
    """Poll ``check`` until true; the state lives in other processes and sockets, so there is no event to await."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        if check():
            return
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {within}s")
        await asyncio.sleep(0.02)


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 10.0, what: str = "condition") -> None:
    """``wait_until`` for checks that must await (an HTTP request to the adapter)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        if await check():
            return
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {within}s")
        await asyncio.sleep(0.05)
