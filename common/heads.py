"""Request heads as they arrive, ahead of the HTTP parser (aiohttp's in the adapter, h11 in the collector): each
must end in time and stay under a size.

aiohttp bounds a head's lines (8 KiB each, 128 of them) but neither its total size nor how long it may take: one
client could hold a connection, and about 2 MiB of parsed header fields on it, for as long as it liked by sending a
line now and then (docs/reliability.md). ``Heads`` sits between the transport and aiohttp's handler, sees the bytes
first and follows the requests' framing: a head ends at its first empty line, and ``Content-Length`` bytes of body
follow it. A head not complete within ``timeout`` of its first byte (the first request's: of the connection) closes
the connection without an answer, as Go's ``ReadHeaderTimeout`` does; one longer than ``max_bytes`` is answered 431
and closed; a chunked body, which no path of this API takes and whose end only parsing it would tell, 411.
The request line must name HTTP/1.0 or 1.1, as Go's server requires: aiohttp's parser takes a line without a version
as HTTP/0.9 and answers any other version as if it were 1.1, so a line without one is answered 400 and another
version 505 before aiohttp sees it. Between requests the handler's keep-alive timer closes a connection left idle.
The collector's h11 connections (``collector/web/connection.py``) get the same bounds from here.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

SLOW = "slow"
LONG = "long"
CHUNKED = "chunked"
MALFORMED = "malformed"
VERSION = "version"
# RFC 9112's request-line: a method token, a target without spaces or controls, HTTP/d.d
_REQUEST_LINE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [\x21-\x7e\x80-\xff]+ HTTP/(\d\.\d)\r?\n")
_VERSIONS = (b"1.0", b"1.1")


def _answer(status: str, text: str = "") -> bytes:
    body = text.encode()
    kind = b"Content-Type: text/plain; charset=utf-8\r\n" if body else b""
    framing = f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
    return f"HTTP/1.1 {status}\r\n".encode() + kind + framing + body


_ANSWERS = {
    LONG: _answer("431 Request Header Fields Too Large"),
    CHUNKED: _answer("411 Length Required"),
    MALFORMED: _answer("400 Bad Request", "400 Bad Request: malformed request line\n"),
    VERSION: _answer("505 HTTP Version Not Supported", "505 HTTP Version Not Supported: this server speaks HTTP/1.1\n"),
}


def request_line_refusal(line: bytes) -> str | None:
    """None for a request line (with its line end) that names HTTP/1.0 or 1.1; else MALFORMED or VERSION."""
    match = _REQUEST_LINE.fullmatch(line)
    if match is None:
        return MALFORMED
    return None if match.group(1) in _VERSIONS else VERSION


def head_end(buffer: bytes | bytearray, start: int = 0) -> int:
    """Where the head in ``buffer`` ends (after its empty line), looking from ``start``; -1 while it has not.

    Bare LFs count too: aiohttp refuses them, but a head it parses must never look unfinished here.
    """
    ends = []
    crlf = buffer.find(b"\n\r\n", start)
    if crlf >= 0:
        ends.append(crlf + 3)
    lf = buffer.find(b"\n\n", start)
    if lf >= 0:
        ends.append(lf + 2)
    return min(ends, default=-1)


_MAX_LENGTH_DIGITS = 18  # a Content-Length past 10^18 bytes is refused by both parsers; int() would balk at 4,300


def body_length(head: bytes) -> int | None:
    """How many bytes of body follow ``head``; None for a chunked body (or any transfer coding)."""
    length = 0
    for line in head.split(b"\n")[1:]:
        if line[:1] in (b" ", b"\t"):
            continue  # a folded line continues the field above (h11 joins it to that field's value)
        name, colon, value = line.partition(b":")
        if not colon:
            continue
        name = name.strip().lower()
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            # the parsers answer 400 to anything but digits and close the connection: then nothing follows
            digits = value.strip()
            length = int(digits) if digits.isdigit() and len(digits) <= _MAX_LENGTH_DIGITS else 0
    return length


class Heads(asyncio.Protocol):
    """Between the transport and aiohttp's ``handler`` (see the module); ``report`` hears of each connection closed
    here, with its kind (SLOW, LONG, CHUNKED, MALFORMED, VERSION) and the client's address; ``opened`` of the
    transport, ``proven`` of the first complete head (once), ``closed`` of the end."""

    def __init__(
        self,
        handler: asyncio.Protocol,
        timeout: float,
        max_bytes: int,
        report: Callable[[str, Any], None],
        closed: Callable[[], None] | None = None,
        opened: Callable[[asyncio.BaseTransport], None] | None = None,
        proven: Callable[[], None] | None = None,
    ) -> None:
        self._handler = handler
        self._opened = opened
        self._proven = proven
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._report = report
        self._closed = closed
        self._transport: asyncio.BaseTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._head = bytearray()
        self._body = 0
        self._line_seen = False  # whether the current head's request line is complete (and was checked)
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if self._opened is not None:
            self._opened(transport)
        self._start_timer()
        self._handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        refusal = self._follow(data)
        if refusal is None:
            self._handler.data_received(data)
        else:
            self._refuse(refusal)

    def _follow(self, data: bytes) -> str | None:
        """Move along the requests in ``data``: None while they are within bounds, else the kind of refusal."""
        pos = 0
        while pos < len(data):
            if self._body:
                step = min(self._body, len(data) - pos)
                self._body -= step
                pos += step
                continue
            if not self._head and data[pos] in b"\r\n":
                pos += 1  # an empty line before a request line is ignored (RFC 9112, 2.2), as the parsers do
                continue
            if self._timer is None:
                self._start_timer()  # a new head's first byte
            before = len(self._head)
            self._head += data[pos:]
            if not self._line_seen:
                line_end = self._head.find(b"\n", before)
                if line_end >= 0:
                    self._line_seen = True
                    refusal = request_line_refusal(bytes(self._head[: line_end + 1]))
                    if refusal is not None:
                        return refusal
            end = head_end(self._head, max(0, before - 2))
            if end < 0:
                return LONG if len(self._head) > self._max_bytes else None
            if end > self._max_bytes:
                return LONG
            length = body_length(bytes(self._head[:end]))
            pos += end - before
            self._head = bytearray()
            self._line_seen = False
            self._stop_timer()
            if length is None:
                return CHUNKED
            if self._proven is not None:
                self._proven()
                self._proven = None
            self._body = length
        return None

    def _refuse(self, kind: str) -> None:
        self._refused = True
        self._stop_timer()
        self._head = bytearray()
        assert isinstance(self._transport, asyncio.WriteTransport), "data comes after connection_made"
        self._report(kind, self._transport.get_extra_info("peername"))
        self._transport.write(_ANSWERS[kind])
        self._transport.close()

    def _start_timer(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self._timeout, self._expire)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        self._refused = True
        if isinstance(self._transport, asyncio.WriteTransport):
            self._report(SLOW, self._transport.get_extra_info("peername"))
            # at once: closing would first flush, and a TLS connection would wait for the client's close_notify
            self._transport.abort()

    def eof_received(self) -> bool | None:
        return self._handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        self._handler.connection_lost(exc)
        if self._closed is not None:
            self._closed()

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()
