"""How long the event loop keeps a callback waiting: a 2 ms ticker beside the work measured (benchmarks only: a figure
that depends on the machine's load is no test's assertion)."""

from __future__ import annotations

import asyncio


class Ticker:
    """Runs every 2 ms while open; ``longest`` is the longest the event loop kept it waiting, ``lasted`` how long it
    was open."""

    def __init__(self) -> None:
        self.longest = self.lasted = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(0.002)
            self.longest = max(self.longest, loop.time() - last)
            last = loop.time()

    async def __aenter__(self) -> Ticker:
        self.lasted = asyncio.get_running_loop().time()
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.sleep(0.05)  # the ticker notes a pause that ended just now
        self.lasted = asyncio.get_running_loop().time() - self.lasted
        if self._task is not None:
            self._task.cancel()
