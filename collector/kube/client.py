"""The collector's Kubernetes API client: a GET answered in full, and a watch read line by line, over HTTP/1.1 on
asyncio's streams, with ``h11`` parsing and framing the messages.

The collector's reads are few and fixed (a LIST and WATCH of its node's pods and ResourceSlices, a GET of the
counters ConfigMap), so this is all of its client: a general HTTP library costs more resident memory than the rest
of the collector, aiohttp's import alone about 16 MB (docs/collector-bench.md, memory). Answers are handed back as
bytes for the caller to decode as JSON. No ``Accept-Encoding`` is sent, so none is to be decoded; redirects are not
followed (an API server sends none), a 3xx is an error status like any other.

Requests made one after the other share one connection, kept while it is idle for at most ``IDLE_SECONDS``; a watch
has a connection of its own. As Go's transport and client-go do for a GET: a kept connection that anything arrived on
while it was idle is not used again; one the server closed as the request went out (nothing of an answer came) is
replaced by a new one and the request sent again; a 429 or 5xx answer with ``Retry-After`` is asked again after that
many seconds, up to ``_MAX_TRIES`` times, while the caller's time allows. A watch the server or the network ends
midway (the connection closed or reset before the body's end, or silent past the read timeout) ends like one the
server closed at its timeout, as client-go's watch ends on a probable EOF: the caller watches again from the last
version it saw.

One byte cap holds every body the server sends: a GET's whole answer (a LIST of the node's objects, a ConfigMap) and
each line of a watch, ``max_body_bytes`` (16 MiB by default). An answer over it is cut as soon as it passes, or refused
by its ``Content-Length`` before it is read, with ``KubeError``: an endless body would otherwise take the collector
past its memory limit (6,954 MiB in 30 s).

Errors leave as ``KubeApiError`` (an error status, with the ``Status`` message the API server sent) or
``KubeUnreachable`` (no complete answer: connection, TLS, time, a stream cut short; the underlying error named in
it), and ``ConfigError`` when the server's address, the credentials or the certificates cannot be used. A 401 makes
the next request read the token again (``credentials.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import cast
from urllib.parse import urlencode, urlsplit

import h11

from collector.errors import ConfigError, KubeApiError, KubeError, KubeUnreachable
from collector.kube.config import KubeConfig
from collector.kube.credentials import Credentials
from collector.kube.tls import Tls

log = logging.getLogger(__name__)

JSON = "application/json"
# a GET's answer or a watch event: an object may be 1.5 MB in etcd, and is larger as JSON; a LIST of one node's pods
# (at most 110 by default) or ResourceSlices, a few MB
MAX_BODY_BYTES = 16 * 1024 * 1024
_MAX_STATUS_BYTES = 64 * 1024  # an error's Status, read for its message
_MAX_HEAD_BYTES = 64 * 1024  # a response's status line and headers (kube-apiserver's are a few hundred bytes)
_READ_BYTES = 64 * 1024
# As aiohttp's connector: API servers and proxies close idle connections, and a request sent on one closed under it
# would fail. Older than this, a connection is closed and a fresh one opened.
IDLE_SECONDS = 15.0
_CLOSE_SECONDS = 5.0  # for the server's side of a TLS close before the connection is cut
_MAX_TRIES = 10  # of a GET answered 429 or 5xx with Retry-After, as client-go's default

# what a connection that failed raises: the network, TLS and time (OSErrors), a server that broke HTTP/1.1
_TROUBLE = (OSError, h11.ProtocolError)


class _Connection:
    """One HTTP/1.1 connection to the API server: the streams carry the bytes, h11 frames and parses them."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._http = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD_BYTES)
        self.idle_since = 0.0  # the event loop's time when its last exchange ended
        self.answered = False  # whether any byte of an answer to the current request came
        self.closed_by_server = False  # whether a read found the server's end of the connection closed

    @classmethod
    async def open(cls, host: str, port: int, tls: ssl.SSLContext | None, server_hostname: str | None) -> _Connection:
        name: str | bytes | None = server_hostname if tls is not None else None
        if isinstance(name, str) and name.isascii():
            # ssl encodes a str name with the IDNA codec, whose import loads unicodedata (1 MiB resident under
            # gVisor) for a name that is ASCII anyway; ssl takes an ASCII name as bytes as it is
            name = name.encode("ascii")
        reader, writer = await asyncio.open_connection(host, port, ssl=tls, server_hostname=cast(str | None, name))
        return cls(reader, writer)

    async def exchange(self, request: h11.Request, read_timeout: float | None) -> h11.Response:
        """Send ``request`` (no body); the head of the answer, each read of it within ``read_timeout`` seconds."""
        self.answered = False
        self._writer.write(self._http.send(request) + self._http.send(h11.EndOfMessage()))
        await self._writer.drain()
        while True:
            event = await self._next_event(read_timeout)
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):  # 100 Continue and the like come before it
                raise h11.RemoteProtocolError(f"{type(event).__name__} where a response was due")

    async def data(self, read_timeout: float | None) -> bytes | None:
        """The next bytes of the body, None at its end; each read within ``read_timeout`` seconds. A body the server
        ends before its length or its last chunk raises ``h11.RemoteProtocolError``."""
        event = await self._next_event(read_timeout)
        if isinstance(event, h11.Data):
            return bytes(event.data)
        if isinstance(event, h11.EndOfMessage):
            return None
        raise h11.RemoteProtocolError(f"{type(event).__name__} within a body")

    async def _next_event(self, read_timeout: float | None) -> h11.Event:
        while not isinstance(event := self._http.next_event(), h11.Event):
            if event is h11.PAUSED:  # h11 reads nothing past a whole answer, and nothing here asks it to
                raise h11.LocalProtocolError("a read past the end of an answer")
            data = await self._read(read_timeout)
            self.answered = self.answered or bool(data)
            self.closed_by_server = not data
            if not data and self._http.their_state is h11.SEND_RESPONSE:
                # h11 would name its state machine; this says what happened
                raise h11.RemoteProtocolError("the server closed the connection without answering")
            self._http.receive_data(data)  # b"": the end, which h11 checks against the body's framing
        return event

    async def _read(self, read_timeout: float | None) -> bytes:
        deadline = asyncio.timeout(read_timeout)
        try:
            async with deadline:
                return await self._reader.read(_READ_BYTES)
        except TimeoutError:
            if deadline.expired():  # not the system's own (ETIMEDOUT), which says enough
                raise TimeoutError(f"nothing read within {read_timeout:g}s") from None
            raise

    def next_cycle(self) -> bool:
        """Whether the exchange ended cleanly and the connection may carry the next one (the server neither asked
        to close it nor did); if so, it is made ready for it."""
        if self._http.our_state is not h11.DONE or self._http.their_state is not h11.DONE or self._ended():
            return False
        self._http.start_next_cycle()
        return not self._http.trailing_data[0]  # bytes after the answer: nothing on this connection can be trusted

    async def usable(self, now: float, idle_seconds: float) -> bool:
        """Whether an idle connection may carry a request now: not too old, and nothing came on it while it was idle
        (the server's close, or an answer to no request, such as a proxy's 408, which would be taken for the next
        request's)."""
        if now - self.idle_since >= idle_seconds or self._ended():
            return False
        try:
            # a read that has to wait is cut at once; one that returns without waiting found bytes, or the end
            async with asyncio.timeout(0):
                await self._reader.read(1)
        except TimeoutError:
            return True
        return False

    def _ended(self) -> bool:
        return self._reader.at_eof() or self._reader.exception() is not None or self._writer.is_closing()

    def abort(self) -> None:
        self._writer.transport.abort()

    async def close(self) -> None:
        self._writer.close()
        try:
            async with asyncio.timeout(_CLOSE_SECONDS):
                await self._writer.wait_closed()
        except (OSError, TimeoutError):
            self.abort()
        except BaseException:
            self.abort()
            raise


class WatchStream:
    """An open watch: its lines as the API server writes them (one JSON event each), until it ends the watch."""

    def __init__(
        self, connection: _Connection, what: str, read_timeout: float, watches: set[_Connection], max_bytes: int
    ) -> None:
        """``watches``: the client's open watches' connections, which ``close`` takes this one from; ``max_bytes``
        bounds a line."""
        self._connection = connection
        self._max_bytes = max_bytes
        self._what = what
        self._read_timeout = read_timeout
        self._watches = watches

    async def lines(self) -> AsyncIterator[bytes]:
        """Each line with its ``\\n``; the last one without it if the body ends so."""
        pending = bytearray()
        try:
            while (data := await self._connection.data(self._read_timeout)) is not None:
                searched = len(pending)  # the bytes before hold no newline
                pending += data
                start = 0
                while (end := pending.find(b"\n", searched)) != -1:
                    yield self._line(pending[start : end + 1])
                    start = searched = end + 1
                del pending[:start]
                self._line(pending)  # a line already too long, before the rest of it comes
            if pending:
                yield bytes(pending)
        except (ConnectionError, TimeoutError, h11.RemoteProtocolError) as e:
            if isinstance(e, h11.RemoteProtocolError) and not self._connection.closed_by_server:
                raise KubeUnreachable(f"{self._what}: {_said(e)}") from None  # bytes that are not HTTP
            # cut midway (a server restarting, a proxy dropping it) or gone silent: ended, the partial line dropped
            log.debug("%s ended midway: %s", self._what, _said(e))
        except _TROUBLE as e:
            raise KubeUnreachable(f"{self._what}: {_said(e)}") from None

    def _line(self, line: bytearray) -> bytes:
        if len(line) > self._max_bytes:  # not quoted: the event could be large
            raise KubeError(f"{self._what}: a watch event over {_show(self._max_bytes)}")
        return bytes(line)

    def close(self) -> None:
        # cut, not closed in turn: the server is still writing, and nothing of it is wanted
        self._connection.abort()
        self._watches.discard(self._connection)

    async def __aenter__(self) -> WatchStream:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


class KubeClient:
    def __init__(
        self,
        config: KubeConfig,
        credentials: Credentials | None = None,
        tls: Tls | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        idle_seconds: float = IDLE_SECONDS,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        """``credentials`` and ``tls`` default to those of ``config``. Connections open with the requests, on the
        event loop that makes them; ``close`` ends them. ``sleep`` waits out a ``Retry-After``; ``idle_seconds`` and
        ``max_body_bytes`` (a GET's answer and a watch's event) are the limits the module's constants give by
        default."""
        self.config = config
        self._sleep = sleep
        self._idle_seconds = idle_seconds
        self.max_body_bytes = max_body_bytes
        self._credentials = credentials or Credentials(config)
        self._tls = tls or Tls(config)
        self._idle: _Connection | None = None  # the last GET's, kept for the next
        self._watches: set[_Connection] = set()

    async def get(self, path: str, params: Mapping[str, str], within: float, accept: str = JSON) -> bytes:
        """The body of a 2xx answer to GET ``path``, read in full within ``within`` seconds (tries again after a
        ``Retry-After`` included)."""
        loop = asyncio.get_running_loop()
        deadline = asyncio.timeout(within)
        try:
            async with deadline:
                for tries in range(1, _MAX_TRIES + 1):
                    try:
                        connection, body = await self._get(path, params, accept)
                        break
                    except KubeApiError as e:
                        wait = e.retry_after
                        when = deadline.when()
                        if wait is None or tries == _MAX_TRIES or (when is not None and loop.time() + wait >= when):
                            raise
                        await self._sleep(wait)
        except _TROUBLE as e:
            said = f"no answer within {within:g}s" if deadline.expired() else _said(e)
            raise KubeUnreachable(f"GET {path}: {said}") from None
        await self._keep(connection)  # the answer is whole: not bounded by ``within``
        return body

    async def watch(self, path: str, params: Mapping[str, str], read_timeout: float, accept: str = JSON) -> WatchStream:
        """An open watch of ``path`` (``params`` say from which version and for how long); its head has come. A read
        silent for ``read_timeout`` seconds ends it with ``KubeUnreachable``; the caller bounds the wait for the
        head."""
        what = f"watch {path}"
        request = await self._request(path, params, accept)
        try:
            connection = await self._open()
            try:
                await self._check(connection, await connection.exchange(request, read_timeout), read_timeout)
            except BaseException:
                connection.abort()
                raise
        except _TROUBLE as e:
            raise KubeUnreachable(f"{what}: {_said(e)}") from None
        self._watches.add(connection)
        return WatchStream(connection, what, read_timeout, self._watches, self.max_body_bytes)

    async def close(self) -> None:
        for connection in self._watches:
            connection.abort()
        self._watches.clear()
        if self._idle is not None:
            idle, self._idle = self._idle, None
            await idle.close()

    async def _get(self, path: str, params: Mapping[str, str], accept: str) -> tuple[_Connection, bytes]:
        request = await self._request(path, params, accept)
        kept = await self._reuse()
        if kept is not None:
            try:
                return kept, await self._answer(kept, request, path)
            except _TROUBLE:
                if kept.answered:
                    raise
                # closed by the server as the request went out, before any of an answer: sent again on a new one
        connection = await self._open()
        return connection, await self._answer(connection, request, path)

    async def _answer(self, connection: _Connection, request: h11.Request, path: str) -> bytes:
        """The body of the answer to ``request`` on ``connection``, which is cut if anything fails; ``KubeError``
        once it is known to be over ``max_body_bytes``."""
        try:
            response = await connection.exchange(request, None)
            await self._check(connection, response, None)
            over = f"GET {path}: an answer over {_show(self.max_body_bytes)}"
            length = next((v for name, v in response.headers if name == b"content-length"), b"")
            if int(length or 0) > self.max_body_bytes:  # h11 has checked it is a number
                raise KubeError(f"{over} (its Content-Length is {int(length)})")
            body = []
            size = 0
            while (data := await connection.data(None)) is not None:
                size += len(data)
                if size > self.max_body_bytes:
                    raise KubeError(f"{over}: {size} bytes had arrived when reading stopped")
                body.append(data)
        except BaseException:
            connection.abort()
            raise
        return b"".join(body)

    async def _request(self, path: str, params: Mapping[str, str], accept: str) -> h11.Request:
        """GET ``path``; ``ConfigError`` when the server's address or the credentials cannot be used."""
        server = urlsplit(self.config.server)
        query = f"?{urlencode(params)}" if params else ""
        headers = [("Host", server.netloc), ("Accept", accept), ("User-Agent", "gpuscale-collector")]
        authorization = await self._credentials.authorization()
        if authorization is not None:
            headers.append(("Authorization", authorization))
        try:
            return h11.Request(method="GET", target=server.path + path + query, headers=headers)
        except h11.LocalProtocolError:  # its text would quote the header, the token with it
            raise ConfigError(
                f"{self.config.origin}: a character HTTP does not allow in the request (the server's address, the "
                "path or the token)"
            ) from None

    async def _open(self) -> _Connection:
        server = urlsplit(self.config.server)
        if server.scheme not in ("http", "https") or not server.hostname:
            raise ConfigError(f"{self.config.origin}: server {self.config.server} is not an http(s) URL")
        https = server.scheme == "https"
        try:
            port = server.port or (443 if https else 80)
        except ValueError as e:  # a port that is not a number, or out of range
            raise ConfigError(f"{self.config.origin}: server {self.config.server}: {e}") from None
        tls = self._tls.context() if https else None
        return await _Connection.open(server.hostname, port, tls, self.config.tls_server_name or server.hostname)

    async def _reuse(self) -> _Connection | None:
        """The idle connection, when it may carry the next request; else None, and it is cut."""
        idle, self._idle = self._idle, None
        if idle is not None and not await idle.usable(asyncio.get_running_loop().time(), self._idle_seconds):
            idle.abort()
            return None
        return idle

    async def _keep(self, connection: _Connection) -> None:
        """Keep ``connection`` for the next request if its exchange left it usable (one is enough); else close it."""
        if self._idle is None and connection.next_cycle():
            connection.idle_since = asyncio.get_running_loop().time()
            self._idle = connection
        else:
            await connection.close()

    async def _check(self, connection: _Connection, response: h11.Response, read_timeout: float | None) -> None:
        if response.status_code < 300:
            return
        if response.status_code == 401:
            self._credentials.rejected()
        message = ""
        try:
            body = b""
            while len(body) < _MAX_STATUS_BYTES and (more := await connection.data(read_timeout)) is not None:
                body += more
            status = json.loads(body)
            if isinstance(status, dict):
                message = str(status.get("message") or "")
        except (ValueError, *_TROUBLE):
            pass  # the status code says enough
        raise KubeApiError(response.status_code, response.reason.decode("latin-1"), message, _retry_after(response))


def _retry_after(response: h11.Response) -> float | None:
    """The seconds a 429 or 5xx answer's ``Retry-After`` asks to wait before the request is sent again; None when it
    asks nothing (client-go reads whole seconds only, and so does this)."""
    if response.status_code != 429 and response.status_code < 500:
        return None
    value = next((v for name, v in response.headers if name == b"retry-after"), b"").strip()
    return float(value) if value.isdigit() else None


def _show(size: int) -> str:
    return f"{size // 2**20} MiB" if size % 2**20 == 0 else f"{size} bytes"


def _said(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
