"""Whatever bytes a client sends, the collector's own server (collector/web/) answers with an HTTP status line or
closes the connection, logs nothing above WARNING, and goes on serving /metrics."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.web.messages import Request, Response, text
from collector.web.server import HttpServer
from common.listener import Limits

WAIT = 10.0
T = TypeVar("T")

# each list repeats its valid choices, so that most requests get past the first check and reach h11 and the paths
TOKENS = st.sampled_from([b"GET"] * 6 + [b"HEAD", b"POST", b"PUT", b"OPTIONS", b"G\x00T", b"", b"get"])
TARGETS = st.sampled_from([b"/metrics"] * 4 + [b"/", b"/health", b"*", b"http://x/metrics", b"/%00", b"/a b", b""])
VERSIONS = st.sampled_from([b"HTTP/1.1"] * 6 + [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1 ", b"HTTP/9", b""])
VALUES = st.sampled_from([b"c", b"c", b"0", b"5", b"-1", b"chunked", b"close", b"100-continue", b"a\x01b", b"\xff"])
FIELDS = st.lists(
    st.tuples(
        st.sampled_from(
            [b"Accept", b"Host", b"Content-Length", b"Transfer-Encoding", b"Connection", b"Expect", b"H\x01"]
        ),
        st.one_of(VALUES, VALUES, st.binary(max_size=8)),
    ),
    max_size=3,
)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """A request head built from parts that are often valid, sometimes not, then any bytes after it."""
    line = draw(TOKENS) + b" " + draw(TARGETS) + b" " + draw(VERSIONS) + draw(st.sampled_from([b"\r\n"] * 4 + [b"\n"]))
    host = draw(st.sampled_from([b"Host: c\r\n"] * 4 + [b""]))
    head = line + host + b"".join(name + b": " + value + b"\r\n" for name, value in draw(FIELDS))
    end = draw(st.sampled_from([b"\r\n"] * 4 + [b"", b"\n"]))
    return head + end + draw(st.one_of(st.just(b""), st.binary(max_size=64)))


class Served:
    """The server on its own loop in a thread, so that hypothesis's examples can stay plain functions."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

        async def answer(request: Request) -> Response:
            return text(200, "ok\n") if request.path == "/metrics" else text(404, "404: Not Found")

        limits = Limits(header_timeout=0.3, handshake_timeout=0.3, idle_timeout=0.3)
        self.server = HttpServer(answer, "127.0.0.1", 0, limits=limits)
        self.run(self.server.start())

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(WAIT)

    def close(self) -> None:
        self.run(self.server.stop(grace=1))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(WAIT)
        self.loop.close()


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    s = Served()
    yield s
    s.close()


def exchange(port: int, data: bytes) -> bytes:
    """``data`` sent, then what comes back until the server closes the connection (or a second's silence)."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=requests())
def test_any_request_is_answered_or_closed_and_serving_goes_on(
    served: Served, data: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    out = exchange(served.server.port, data)
    # each answer is a whole HTTP/1.1 response; none is 500 (a request the server failed on)
    assert out == b"" or out.startswith(b"HTTP/1.1 ")
    assert b"HTTP/1.1 500" not in out
    assert not [r for r in caplog.records if r.levelno > logging.WARNING]
    assert exchange(served.server.port, b"GET /metrics HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n").endswith(
        b"\r\n\r\nok\n"
    )
