"""A forwarding proxy in front of the real Prometheus, to see what the adapter sends and to make Prometheus fail.

It records every request (method, path, headers, body size), and can be stopped (connection refused), made slow,
made to answer something else (``respond``: a 500, invalid JSON, a huge result; ``stream``: chunks sent as they come,
without a Content-Length), or served over TLS that requires a client certificate, while the Prometheus behind it
stays real. ``hung_up`` counts the streams the client closed before their end.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import web


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


class PrometheusProxy:
    def __init__(self, upstream: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.ssl_context = ssl_context
        self.seen: list[Seen] = []
        self.delay = 0.0
        self.respond: tuple[int, bytes] | None = None  # answer this (status, body) instead of forwarding
        self.stream: Callable[[], AsyncIterator[bytes]] | None = None  # or these chunks, with no Content-Length
        self.hung_up = 0
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    def count(self, path: str, method: str | None = None) -> int:
        return sum(1 for s in self.seen if s.path == path and method in (None, s.method))

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Seen(request.method, request.path, dict(request.query), dict(request.headers), body))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.stream is not None:
            return await self._stream(request, self.stream())
        if self.respond is not None:
            status, payload = self.respond
            return web.Response(body=payload, status=status, content_type="application/json")
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")}
        async with self._session.request(
            request.method, f"{self.upstream}{request.path_qs}", data=body or None, headers=headers
        ) as resp:
            payload = await resp.read()
            return web.Response(body=payload, status=resp.status, content_type=resp.content_type)

    async def _stream(self, request: web.Request, chunks: AsyncIterator[bytes]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            async for chunk in chunks:
                await resp.write(chunk)
            await resp.write_eof()
        except ConnectionError:
            self.hung_up += 1
        return resp

    async def start(self) -> str:
        self._session = self._session or aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self.ssl_context)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self.url

    async def stop(self) -> None:
        """Stop listening: the adapter now gets connection refused, as from a Prometheus that is down."""
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    async def close(self) -> None:
        await self.stop()
        if self._session:
            await self._session.close()
