"""One HTTP/1.1 connection of the collector's server: requests parsed by h11, answered one after the other.

The listener (``common/listener.py``) puts its bounds in front: the handshake and each request head in time and of
bounded size, request lines of HTTP/1.0 or 1.1 only, no chunked bodies. What is left here is HTTP itself: h11 reads
each request and frames each answer (``Content-Length``, keep-alive, ``Connection: close`` where the client asked
for it or HTTP/1.0 implies it), and a connection that waits between requests for longer than the idle timeout is
closed, as Go's ``IdleTimeout`` does. A request h11 cannot take is answered 400 (or its own status) naming no part
of it, and the connection closed. A target in absolute form (``http://host/metrics``) is served by its path, as RFC
9112 requires.

No path takes a body: a request that declares one is answered as soon as its head is in (``Expect: 100-continue``
needs no 100 then), with ``Connection: close``, and the connection is closed after the answer rather than the body
waited for. Pipelined requests are answered one after the other, and the next is taken only once the transport has
written the last answer out (``pause_writing``); while one is being answered, reading stops once ``_MAX_BACKLOG``
bytes wait unparsed. So a client that sends without reading holds at most that much, not an answer per request.

A client that asks and does not read holds its answer in the write buffer: answers unread hold at most the server's
``SendBudget`` together, the connections whose answers waited longest cut to make room for a new one, and one left
unread past its write timeout is cut too (``send_budget.py``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections.abc import Sequence
from typing import cast
from urllib.parse import urlsplit

import h11

from collector.web.messages import Answer, Request, Response, http_date, reason, status_text, text
from collector.web.send_budget import SendBudget
from common import listener

log = logging.getLogger(__name__)

_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # in a field value: controls but HTAB
_MAX_BACKLOG = 64 * 1024  # bytes received and not yet parsed while an answer is under way, before reading pauses
# After an answer sent before the request's body was read: the sending side is closed and what still comes is read
# and dropped for this long before the connection closes; closing with unread bytes would reset the connection, and
# the client could lose the answer with it (Go's server waits 500 ms likewise).
_LINGER_SECONDS = 0.5


class Connection(listener.Handler):
    def __init__(self, answer: Answer, idle_timeout: float, max_head_bytes: int, budget: SendBudget) -> None:
        """``budget``: the room for unread answers, shared by every connection of the server."""
        self._answer = answer
        self._budget = budget
        self._write_timer: asyncio.TimerHandle | None = None
        self._idle_timeout = idle_timeout
        # above the listener's own bound, which answers 431 first
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head_bytes + 1024)
        self._transport: asyncio.Transport | None = None
        self._request: h11.Request | None = None
        self._answering: asyncio.Task[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closing = False  # the server is stopping: close once the answer in progress is sent
        self._writing_paused = False  # the transport's buffer is full: no next answer until it drains
        self._reading_paused = False
        self._lingering = False  # answered and half-closed: what comes is dropped until the close

    @property
    def idle(self) -> bool:
        return self._answering is None

    @property
    def certified(self) -> bool:
        ssl_object = self._transport.get_extra_info("ssl_object") if self._transport is not None else None
        return ssl_object is not None and ssl_object.getpeercert(binary_form=True) is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        # paused whenever anything of an answer is left unsent, resumed once all of it is: the budget's room is
        # given back then
        self._transport.set_write_buffer_limits(high=0)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # what the system holds of an answer, per connection, bounded; the budget counts what is left over
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._budget.send_buffer)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        self._stop_idle_timer()
        if self._h11.their_state is h11.IDLE and not self._h11.trailing_data[0]:
            data = data.lstrip(b"\r\n")  # empty lines before a request line are ignored (RFC 9112, 2.2); h11 balks
            if not data:
                return
        self._h11.receive_data(data)
        if self._answering is None and not self._writing_paused:
            self._next()
        elif self._transport is not None and len(self._h11.trailing_data[0]) > _MAX_BACKLOG:
            self._transport.pause_reading()
            self._reading_paused = True

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._taken()
        if self._answering is None:
            self._next()

    def eof_received(self) -> bool:
        if self._lingering:
            return False  # the client has read the answer and is done: close
        self._h11.receive_data(b"")
        if self._answering is None and not self._writing_paused:
            self._next()
        # a plain connection stays open for the answer in progress, then closes itself; TLS closes either way
        plain = self._transport is not None and self._transport.get_extra_info("sslcontext") is None
        return self._answering is not None and plain

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_idle_timer()
        self._taken()
        self._transport = None
        if self._answering is not None:
            self._answering.cancel()

    def shut_down(self) -> None:
        """The server is stopping: close now if no request is being answered, else once its answer is sent."""
        self._closing = True
        if self._answering is None and self._transport is not None:
            self._transport.close()

    def _next(self) -> None:
        """Move along the requests received: start answering the next complete one, or wait for more."""
        while (
            self._transport is not None
            and not self._transport.is_closing()
            and self._answering is None
            and not self._writing_paused
        ):
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as e:
                self._refuse(e.error_status_hint)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                if self._reading_paused:
                    self._reading_paused = False
                    self._transport.resume_reading()
                return
            if isinstance(event, h11.Request):
                if any(_CONTROL.search(value) for _, value in event.headers):
                    self._refuse(400)  # h11 lets them through; Go's server and aiohttp's parser refuse them
                    return
                self._request = event
                if _declares_body(event):  # answered now, and the connection closed after it
                    self._answering = asyncio.get_running_loop().create_task(self._respond(event, close=True))
            elif isinstance(event, h11.EndOfMessage):
                assert self._request is not None, "h11 gives a request before its end"
                request = self._request
                self._answering = asyncio.get_running_loop().create_task(self._respond(request))
            elif isinstance(event, h11.ConnectionClosed):
                self._transport.close()
                return
            # h11.Data: a body no path takes, dropped

    async def _respond(self, event: h11.Request, close: bool = False) -> None:
        """Answer ``event``; ``close``: with ``Connection: close``, and close the connection after it."""
        method, path = event.method.decode("latin-1"), _path(event.target.decode("latin-1"))
        try:
            request = Request(method, path, _headers(event.headers), self._transport)
            response = await self._answer(request)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug, answered and logged: the connection must not hang on it
            log.exception("%s %s failed", method, path)
            response = text(500, status_text(500) + "\n")
        self._answering = None
        self._request = None
        if self._transport is None or self._transport.is_closing():
            return
        head_only = method == "HEAD"
        size = 0 if head_only else len(response.body)
        self._budget.take(self, size)
        try:
            self._send(response, head_only=head_only, close=close)
            self._sent(size)
        except (h11.LocalProtocolError, ValueError):  # ValueError: a header h11 cannot encode
            self._transport.abort()  # an answer h11 cannot frame: the client sees the connection cut, not a bad one
            return
        if close and self._h11.their_state is not h11.DONE and self._transport.can_write_eof():
            self._linger()
            return
        if close or self._closing or self._h11.our_state is not h11.DONE or self._h11.their_state is not h11.DONE:
            self._transport.close()
            return
        self._h11.start_next_cycle()
        self._start_idle_timer()
        self._next()  # a request the client sent before this answer (pipelined) is in h11's buffer

    def _send(self, response: Response, head_only: bool, close: bool) -> None:
        assert self._transport is not None, "checked by the caller"
        headers = [(name, value) for name, value in response.headers.items()
                   if name.lower() not in ("content-length", "transfer-encoding", "date")]  # fmt: skip
        headers += [("Content-Length", str(len(response.body))), ("Date", http_date())]
        if close:
            headers.append(("Connection", "close"))
        out = self._h11.send(h11.Response(status_code=response.status, headers=headers,
                                          reason=reason(response.status).encode()))  # fmt: skip
        if response.body and not head_only:
            out += self._h11.send(h11.Data(data=response.body))
        out += self._h11.send(h11.EndOfMessage())
        self._transport.write(out)

    def _sent(self, size: int) -> None:
        """``size`` bytes of answer were written and counted in the budget: what the system took at once is given
        back, the rest once the buffer drains (``resume_writing``) or the connection closes, which it is if that
        takes longer than the write timeout."""
        assert self._transport is not None, "checked by the caller"
        self._budget.give(self, size - min(size, self._transport.get_write_buffer_size()))
        if self._transport.get_write_buffer_size() and self._write_timer is None:
            self._write_timer = asyncio.get_running_loop().call_later(self._budget.write_timeout, self._unread_expired)

    def _taken(self) -> None:
        """The write buffer is empty, or the connection gone: its answers hold no room any more."""
        self._budget.give(self)
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _unread_expired(self) -> None:
        self._write_timer = None
        log.debug("cut a connection whose client read no answer within %gs", self._budget.write_timeout)
        self.cut()

    def cut(self) -> None:
        """Close at once, what is unsent dropped: its answer waited too long, or its room went to a newer one."""
        self._taken()
        if self._transport is not None:
            self._transport.abort()

    def _linger(self) -> None:
        assert self._transport is not None, "checked by the caller"
        self._lingering = True
        self._transport.write_eof()
        asyncio.get_running_loop().call_later(_LINGER_SECONDS, self._transport.close)
        if self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()

    def _refuse(self, status: int) -> None:
        """Answer a request h11 could not take, without quoting it (its message would), and close."""
        assert self._transport is not None, "called while connected"
        peer = self._transport.get_extra_info("peername")
        log.debug("refused a request from %s that could not be parsed", peer[0] if peer else "an unknown address")
        body = f"{status} {reason(status)}: malformed request\n".encode()
        head = (f"HTTP/1.1 {status} {reason(status)}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
        self._transport.write(head + body)
        self._transport.close()

    def _start_idle_timer(self) -> None:
        self._idle_timer = asyncio.get_running_loop().call_later(self._idle_timeout, self._idle_expired)

    def _stop_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _idle_expired(self) -> None:
        self._idle_timer = None
        if self._transport is not None and self._answering is None:
            self._transport.close()


def _declares_body(request: h11.Request) -> bool:
    """Whether a body follows the head (h11 has checked the framing headers; the listener refused chunked ones)."""
    for name, value in request.headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip(b"0")):
            return True
    return False


def _path(target: str) -> str:
    """The path a request target names: its origin form less the query, or an absolute form's path."""
    if target[:8].lower().startswith(("http://", "https://")):
        return urlsplit(target).path or "/"
    return target.partition("?")[0]


def _headers(fields: Sequence[tuple[bytes, bytes]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in fields:
        key, text_value = name.decode("latin-1"), value.decode("latin-1")
        out[key] = f"{out[key]}, {text_value}" if key in out else text_value
    return out
