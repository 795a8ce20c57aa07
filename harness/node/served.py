"""The collector's HTTP server in the test's process, on 127.0.0.1, and a client of it."""

from __future__ import annotations

import aiohttp

from collector.web.server import HttpServer


class Served:
    """An answer served by the collector's HTTP server on 127.0.0.1, and a client of it."""

    def __init__(self, server: HttpServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session
        self.url = f"http://127.0.0.1:{server.port}"

    async def get(self, path: str, **headers: str) -> tuple[int, dict[str, str], str]:
        async with self.session.get(self.url + path, headers=headers) as response:
            return response.status, dict(response.headers), await response.text()
