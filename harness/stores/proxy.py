"""A forwarding proxy in front of the real Prometheus, to see what the adapter sends and to make Prometheus fail.

It records every request (method, path, headers, body size), and can be stopped (connection refused), made slow,
made to answer something else (``respond``: a 500, invalid JSON, a huge result; ``stream``: chunks sent as they come,
without a Content-Length), or served over TLS that requires a client certificate, while the Prometheus behind it
stays real. ``hung_up`` counts the streams the client closed before their end.

It also stands in for what runs in front of Prometheus in a multi-tenant or federated store, where that cannot
run here (no Mimir, Cortex or Thanos binaries on this machine):

- ``tenant``: a tenant gateway as Mimir's and Cortex's: a request without ``X-Scope-OrgID`` is answered 401 ``no org
  id`` (text, as their auth middleware writes it), one for another tenant 401 too; ``refused`` counts them.
- ``stores_down``: a Thanos querier one of whose stores does not answer. ``partial_response`` (a query parameter or
  form field, read as Go's ``strconv.ParseBool``; absent: ``partial_response_default``, as the querier's
  ``--query.partial-response``) true: the data of the stores that answered (all of it here), with a warning per
  store down in the querier's words; false: 422 ``execution``, the error the querier's PromQL engine gives when the
  proxy store aborts. Any other value: 400 ``bad_data``.
- ``honour_limit``: ``limit`` on listings as Prometheus 2.49 and later read it (this one is 2.42, which ignores it):
  at most that many entries, and the warning ``results truncated due to limit`` when there were more.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    form: dict[str, str] = field(default_factory=dict)  # the query's parameters and a POST's form fields


_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")
_LISTINGS = ("/api/v1/series", "/api/v1/labels")


class PrometheusProxy:
    def __init__(self, upstream: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.ssl_context = ssl_context
        self.seen: list[Seen] = []
        self.delay = 0.0
        self.respond: tuple[int, bytes] | None = None  # answer this (status, body) instead of forwarding
        self.stream: Callable[[], AsyncIterator[bytes]] | None = None  # or these chunks, with no Content-Length
        self.hung_up = 0
        self.tenant: str | None = None
        self.refused = 0
        self.stores_down: list[str] = []
        self.partial_response_default = True
        self.honour_limit = False
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
        form = {**request.query, **dict(urllib.parse.parse_qsl(body.decode(errors="replace")))}
        self.seen.append(Seen(request.method, request.path, dict(request.query), dict(request.headers), body, form))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.tenant is not None and request.headers.get("X-Scope-OrgID") != self.tenant:
            self.refused += 1
            text = "no org id" if "X-Scope-OrgID" not in request.headers else "the tenant may not read here"
            return web.Response(text=text + "\n", status=401)
        partial = form.get("partial_response")
        if self.stores_down and partial not in (None, *_GO_TRUE, *_GO_FALSE):
            error = f"'partial_response' parameter: strconv.ParseBool: parsing {partial!r}: invalid syntax"
            return _api_error(400, "bad_data", error)
        if self.stores_down and not (partial in _GO_TRUE or (partial is None and self.partial_response_default)):
            cause = "rpc error: code = Aborted desc = " + "; ".join(map(_store_failure, self.stores_down))
            prefix = "expanding series: proxy Series(): " if request.path == "/api/v1/query" else ""
            return _api_error(422, "execution", prefix + cause)
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
        if resp.status == 200 and (self.stores_down or self.honour_limit):
            payload = self._annotate(request.path, form, payload)
        return web.Response(body=payload, status=resp.status, content_type=resp.content_type)

    def _annotate(self, path: str, form: dict[str, str], payload: bytes) -> bytes:
        answer = json.loads(payload)
        warnings = list(answer.get("warnings", []))
        warnings += [_store_failure(store) for store in self.stores_down]
        limit = int(form.get("limit") or 0)
        listing = path in _LISTINGS or path.startswith("/api/v1/label/")
        if self.honour_limit and listing and 0 < limit < len(answer["data"]):
            answer["data"] = answer["data"][:limit]
            warnings.append("results truncated due to limit")
        if warnings:
            answer["warnings"] = warnings
        return json.dumps(answer).encode()

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


def _store_failure(store: str) -> str:
    """How Thanos's proxy store words a store that did not answer (``receive series from <store>: <gRPC error>``),
    with the time range asked in milliseconds, which differs from one request to the next."""
    now = time.time_ns() // 1_000_000
    return (
        f'receive series from Addr: {store} LabelSets: {{store="{store}"}} MinTime: {now - 300_000} MaxTime: {now}: '
        'rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp '
        f'{store}: connect: connection refused"'
    )


def _api_error(status: int, error_type: str, error: str) -> web.Response:
    body = {"status": "error", "errorType": error_type, "error": error}
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")
