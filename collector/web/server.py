"""The collector's HTTP server: its paths' ``answer`` behind the bounded listener, one h11 connection per client.

Its own rather than aiohttp's: the collector serves three fixed paths, and aiohttp's import alone is about 16 MB
resident, a third of the whole collector with ``-k`` (docs/collector-bench.md, memory).
"""

from __future__ import annotations

import ssl

from collector.web.connection import Connection
from collector.web.messages import Answer
from collector.web.send_budget import SendBudget
from common.listener import BoundedListener, Limits

# how long a stopping server waits for the answers in progress before it cuts their connections
STOP_GRACE = 5.0


class HttpServer:
    def __init__(
        self,
        answer: Answer,
        host: str | None,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        limits: Limits | None = None,
        budget: SendBudget | None = None,
    ) -> None:
        """``host`` None listens on every address, IPv4 and IPv6; port 0 on one the system chooses (``port``).
        ``budget``: the room for answers clients have not read, shared by every connection."""
        self.limits = limits_ = limits or Limits()
        self.budget = budget_ = budget or SendBudget()

        def connection() -> Connection:
            return Connection(answer, limits_.idle_timeout, limits_.max_head_bytes, budget_)

        self.listener = BoundedListener(connection, host, port, ssl_context=ssl_context, limits=limits_)

    @property
    def port(self) -> int:
        return self.listener.port

    async def start(self) -> None:
        await self.listener.start()

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """No new connections; the answers in progress are sent (within ``grace`` seconds), then every connection
        is closed."""
        self.listener.close()
        for handler in self.listener.handlers():
            if isinstance(handler, Connection):
                handler.shut_down()
        if not await self.listener.drained(grace):
            self.listener.abort()
            await self.listener.drained(1.0)  # each aborted connection is lost on the loop's next pass
