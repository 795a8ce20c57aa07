"""How the server takes connections, and for how long it keeps them.

aiohttp alone keeps a connection that never completes a request for an hour (its keep-alive default), has no limit on
open connections, no deadline for a request's head nor bound on its size, and asyncio gives every TLS connection a
256 KiB receive buffer for its whole life. ``BoundedListener`` listens for any HTTP/1.1 connection handler (aiohttp's,
through ``connections.BoundedSite``, or the collector's own) and bounds each stage:

- at most ``max_connections`` open. At the limit a new connection takes the place of the oldest one that has not
  yet sent a complete request head, else of the oldest one that waits between requests and presented no client
  certificate (closed at once), so that strangers who open connections, and send nothing or a request now and then,
  cannot shut out the aggregator (whose front-proxy certificate keeps its connections), the probes or Prometheus,
  whose requests follow their connections within milliseconds; only when every open connection is answering a
  request or holds a certificate is the new one closed as it is accepted, before any TLS work or buffer;
- the TLS handshake within ``handshake_timeout``;
- each request head within ``header_timeout`` of its first byte (the first one: of the handshake) and at most
  ``max_head_bytes`` long (``heads.py``);
- an idle connection closed after ``idle_timeout`` (the handler's keep-alive timer);
- a 4 KiB TLS receive buffer, enough for a request head (one TLS record is at most 16 KiB, read in a few pieces);
- freed memory handed back to the system once connections have closed (``heap.py``).

The timeouts are the Kubernetes API server's (``ReadHeaderTimeout`` 32 s, which Go also applies to the handshake,
``IdleTimeout`` 90 s). That server takes heads of up to 1 MiB; here 64 KiB, eight times aiohttp's longest header
line, so that 1,000 connections with unfinished heads hold about 210 MiB rather than 2 GiB. The connection limit has
no counterpart there; 1,000 is far above what the aggregator, the probes and Prometheus open, and that many idle
connections take 30 to 40 MiB (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from asyncio import sslproto
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from common import heads
from common.heap import malloc_trim
from common.log_limit import LogLimit, left_out

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 1000
HANDSHAKE_TIMEOUT = 32.0
HEADER_TIMEOUT = 32.0
IDLE_TIMEOUT = 90.0
MAX_HEAD_BYTES = 64 * 1024
# how long a closing TLS connection waits for the client's close_notify: it is a courtesy a server need not wait for
SHUTDOWN_TIMEOUT = 5.0
TLS_READ_SIZE = 4 * 1024
# memory is handed back a second after this many connections have closed since the last time: once per burst
TRIM_AFTER_CLOSES = 64
TRIM_DELAY = 1.0


@dataclass(frozen=True)
class Limits:
    max_connections: int = MAX_CONNECTIONS
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    header_timeout: float = HEADER_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT
    max_head_bytes: int = MAX_HEAD_BYTES


class ListenError(Exception):
    """The port cannot be opened: the message names the address and the flags that set it."""


class Startable(Protocol):
    async def start(self) -> None: ...


async def listen(site: Startable, address: str) -> None:
    """``site.start()``; ``ListenError`` naming ``address`` (and its flags) when the port is taken or not allowed."""
    try:
        await site.start()
    except OSError as e:
        # asyncio's message repeats the address; the errno's own words say what is wrong
        why = os.strerror(e.errno).lower() if e.errno else str(e)
        raise ListenError(f"cannot listen on {address}: {why}") from e


class Handler(asyncio.Protocol):
    """What answers the requests of one connection, as the listener sees it."""

    __slots__ = ()

    @property
    def idle(self) -> bool:
        """Whether the connection waits between requests: one a newcomer may take the place of."""
        raise NotImplementedError

    @property
    def certified(self) -> bool:
        """Whether the client presented a certificate the TLS handshake verified."""
        raise NotImplementedError


class _Slot:
    """An accepted connection as the site follows it: its transport, to close it if it must make room, and its
    handler, which tells whether it is answering a request and whether its client presented a certificate."""

    __slots__ = ("handler", "transport")

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.transport: asyncio.BaseTransport | None = None

    @property
    def yields(self) -> bool:
        """Whether a newcomer may take its place: waiting between requests, without a client certificate."""
        return self.transport is not None and self.handler.idle and not self.handler.certified

    def opened(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport


class _Refused(asyncio.Protocol):
    def __init__(self, refused: Callable[[Any], None]) -> None:
        self._refused = refused

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._refused(transport.get_extra_info("peername"))
        transport.close()


class _TLS(sslproto.SSLProtocol):
    """asyncio's TLS layer with a small receive buffer, telling the site when the connection is gone."""

    max_size = TLS_READ_SIZE

    def __init__(
        self,
        app_protocol: asyncio.BaseProtocol,
        context: ssl.SSLContext,
        handshake_timeout: float,
        closed: Callable[[], None],
        opened: Callable[[asyncio.BaseTransport], None],
    ) -> None:
        super().__init__(
            asyncio.get_running_loop(),
            app_protocol,
            context,
            # the handshake's outcome needs no waiter: a failed one closes the connection, and that is all
            None,  # type: ignore[arg-type]
            server_side=True,
            # typeshed says int; asyncio takes any positive number of seconds
            ssl_handshake_timeout=handshake_timeout,  # type: ignore[arg-type]
            ssl_shutdown_timeout=SHUTDOWN_TIMEOUT,
        )
        self._closed = closed
        self._opened = opened

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._opened(transport)  # the TCP transport: closing it ends the handshake too
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        self._closed()


class BoundedListener:
    """Listens on ``host`` (None: every address, IPv4 and IPv6) and ``port`` with the bounds of this module, each
    accepted connection answered by a new ``handler()``; ``trim`` hands freed memory back to the system."""

    def __init__(
        self,
        handler: Callable[[], Handler],
        host: str | None,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        limits: Limits | None = None,
        trim: Callable[[], None] | None = None,
        log_limit: LogLimit | None = None,
        backlog: int = 128,
    ) -> None:
        self.limits = limits or Limits()
        self.open = 0
        self.server: asyncio.Server | None = None
        self._handler = handler
        self._host = host
        self._port = port
        self._ssl_context = ssl_context
        self._backlog = backlog
        self._trim = trim or malloc_trim()
        self._log_limit = log_limit or LogLimit(60.0)
        self._closes = 0
        self._trim_timer: asyncio.TimerHandle | None = None
        self._unproven: dict[_Slot, None] = {}  # connections without a complete request head yet, oldest first
        self._slots: dict[_Slot, None] = {}  # every open connection, oldest first
        self._drained: asyncio.Event | None = None  # set when the last open connection closes

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host or '*'}:{self._port}"

    @property
    def port(self) -> int:
        """The port listened on: once started, the one the system chose for port 0."""
        return self._port

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # No ssl= here: each accepted connection gets its TLS layer from _accept, after the limit is checked. Not
        # serving yet: asyncio's create_server yields to the loop after its sockets listen, and a start cancelled
        # there (a program stopped as it starts) would lose the server with its sockets still open.
        self.server = await loop.create_server(
            self._accept, self._host, self._port, backlog=self._backlog, start_serving=False
        )
        self._port = int(self.server.sockets[0].getsockname()[1])
        await self.server.start_serving()  # cancelled here, the server is kept for close()

    def handlers(self) -> list[Handler]:
        """The open connections' handlers, oldest first."""
        return [slot.handler for slot in self._slots]

    def _accept(self) -> asyncio.BaseProtocol:
        if self.open >= self.limits.max_connections and not self._make_room():
            return _Refused(self._refused)
        self.open += 1
        slot = _Slot(self._handler())
        self._unproven[slot] = None
        self._slots[slot] = None
        limits = self.limits

        def proven() -> None:
            self._unproven.pop(slot, None)

        def closed() -> None:
            self._closed(slot)

        head_limits = (limits.header_timeout, limits.max_head_bytes, self._closed_early)
        if self._ssl_context is None:
            return heads.Heads(slot.handler, *head_limits, closed, opened=slot.opened, proven=proven)
        http = heads.Heads(slot.handler, *head_limits, proven=proven)
        return _TLS(http, self._ssl_context, limits.handshake_timeout, closed, slot.opened)

    def _make_room(self) -> bool:
        """Close the oldest connection that has sent no complete request head, else the oldest that waits between
        requests without a client certificate; False when there is none."""
        oldest = next((s for s in self._unproven if s.transport is not None), None)
        why = "the oldest without a complete request"
        if oldest is None:
            oldest = next((s for s in self._slots if s.yields), None)
            why = "the oldest idle one without a client certificate"
        if oldest is None or oldest.transport is None:
            return False
        self._unproven.pop(oldest, None)
        del self._slots[oldest]
        held = self._log_limit.allow("made room")
        if held is not None:
            log.warning(
                "closed the connection from %s, %s, to take a new one: %d are open, the most allowed%s",
                _address(oldest.transport.get_extra_info("peername")),
                why,
                self.open,
                left_out(held, self._log_limit.interval),
            )
        cast(asyncio.Transport, oldest.transport).abort()  # its slot frees as it closes, on the loop's next pass
        return True

    def _closed(self, slot: _Slot) -> None:
        self._unproven.pop(slot, None)
        self._slots.pop(slot, None)
        self.open -= 1
        if not self.open and self._drained is not None:
            self._drained.set()
        self._closes += 1
        if self._closes >= TRIM_AFTER_CLOSES and self._trim_timer is None:
            self._trim_timer = asyncio.get_running_loop().call_later(TRIM_DELAY, self._release)

    def _release(self) -> None:
        self._trim_timer = None
        self._closes = 0
        self._trim()

    def _refused(self, peer: Any) -> None:
        held = self._log_limit.allow("refused")
        if held is not None:
            log.warning(
                "refused a connection from %s: %d are open, the most allowed, each answering a request or holding a "
                "client certificate%s",
                _address(peer),
                self.open,
                left_out(held, self._log_limit.interval),
            )

    def _closed_early(self, kind: str, peer: Any) -> None:
        held = self._log_limit.allow(kind)
        if held is None:
            return
        why = {
            heads.SLOW: f"sent no complete request head within {self.limits.header_timeout:g}s",
            heads.LONG: f"sent a request head over {self.limits.max_head_bytes} bytes (answered 431)",
            heads.CHUNKED: "sent a chunked request body, which no path takes (answered 411)",
            heads.MALFORMED: "sent a request line that is not HTTP/1.x's (answered 400)",
            heads.VERSION: "asked for an HTTP version other than 1.0 or 1.1 (answered 505)",
        }[kind]
        log.warning(
            "closed a connection from %s that %s%s", _address(peer), why, left_out(held, self._log_limit.interval)
        )

    async def drained(self, within: float) -> bool:
        """Wait until no connection is open, at most ``within`` seconds; whether none is."""
        if self.open:
            self._drained = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), within)
            self._drained = None
        return not self.open

    def abort(self) -> None:
        """Cut every open connection, in its handshake or not; each is lost on the loop's next pass."""
        for slot in list(self._slots):
            if slot.transport is not None:
                cast(asyncio.Transport, slot.transport).abort()

    def close(self) -> None:
        """Stop listening; open connections stay, for their handlers to finish and close."""
        if self._trim_timer is not None:
            self._trim_timer.cancel()
            self._trim_timer = None
        if self.server is not None:
            self.server.close()


def _address(peer: Any) -> str:
    return str(peer[0]) if isinstance(peer, tuple) and peer else "an unknown address"
