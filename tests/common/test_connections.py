"""The server's connection bounds (common/connections.py) over real sockets and TLS, with short limits."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from common.connections import TRIM_AFTER_CLOSES, BoundedSite, Limits, runner
from harness.waiting import wait_until

REQUEST = b"GET / HTTP/1.1\r\nHost: adapter\r\n\r\n"


async def hello(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@dataclass
class Served:
    site: BoundedSite
    port: int
    client: ssl.SSLContext | None
    trims: list[int] = field(default_factory=list)
    certified: ssl.SSLContext | None = None  # a client that presents a certificate of the CA the server trusts

    async def connect(self, certified: bool = False) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=self.certified if certified else self.client)


@asynccontextmanager
async def serve(
    tmp_path: Path,
    limits: Limits,
    tls: bool = True,
    slow: Callable[[web.Request], Awaitable[web.Response]] | None = None,
) -> AsyncIterator[Served]:
    """``slow``: the handler of ``/slow``."""
    client = certified = server = None
    if tls:
        # as the adapter serves: a client certificate is asked for, and checked when one is presented
        ca = trustme.CA()
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert("127.0.0.1").configure_cert(server)
        server.verify_mode = ssl.CERT_OPTIONAL
        ca.configure_trust(server)
        client = ssl.create_default_context()
        ca.configure_trust(client)
        certified = ssl.create_default_context()
        ca.configure_trust(certified)
        ca.issue_cert("front-proxy-client").configure_cert(certified)
    app = web.Application()
    app.router.add_get("/", hello)
    if slow is not None:
        app.router.add_get("/slow", slow)
    app_runner = runner(app, limits, None)
    await app_runner.setup()
    trims: list[int] = []
    site = BoundedSite(
        app_runner, "127.0.0.1", 0, ssl_context=server, limits=limits, trim=lambda: trims.append(site.open)
    )
    await site.start()
    try:
        yield Served(site, app_runner.addresses[0][1], client, trims, certified)
    finally:
        await app_runner.cleanup()


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(REQUEST)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    await reader.readexactly(2)  # "ok"
    return head.split(b"\r\n", 1)[0]


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    """Whether the server closes the connection within ``within`` seconds (without answering anything)."""
    try:
        data = await asyncio.wait_for(reader.read(1), within)
    except TimeoutError:
        return False
    except (OSError, ssl.SSLError):
        return True
    assert data == b"", data
    return True


async def slow_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, lines: int = 50) -> int:
    """A request head sent a header line every 0.2 s: how many lines went before the server closed the connection
    without answering (``lines`` if it never did)."""
    writer.write(b"GET / HTTP/1.1\r\nHost: adapter\r\n")
    sent = 0
    while sent < lines and not await closed_by_server(reader, 0.2):
        writer.write(f"X-Slow-{sent}: {sent}\r\n".encode())
        sent += 1
    writer.close()
    return sent


async def test_a_head_sent_a_line_at_a_time_is_cut_off_at_the_header_timeout(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits(header_timeout=0.5)) as served:
        # the slow client would have taken 10 s; it was closed before it got there
        assert await slow_head(*await served.connect()) < 50


async def test_a_head_that_arrives_in_time_is_answered_and_the_connection_kept(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits(header_timeout=0.3, idle_timeout=30)) as served:
        reader, writer = await served.connect()
        assert await answer(reader, writer) == b"HTTP/1.1 200 OK"
        # past the header timeout: it runs from a head's first byte, and an idle connection has no head pending
        assert not await closed_by_server(reader, 1.0)
        assert await answer(reader, writer) == b"HTTP/1.1 200 OK"
        writer.close()


async def test_a_head_split_across_reads_ends_the_header_deadline(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits(header_timeout=0.5, idle_timeout=30)) as served:
        reader, writer = await served.connect()
        for part in (REQUEST[:-3], REQUEST[-3:-1], REQUEST[-1:]):
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.1)
        await reader.readuntil(b"ok")
        assert not await closed_by_server(reader, 1.0)
        writer.close()


async def test_a_later_head_on_a_kept_connection_has_the_same_deadline(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits(header_timeout=0.5, idle_timeout=30)) as served:
        reader, writer = await served.connect()
        assert await answer(reader, writer) == b"HTTP/1.1 200 OK"
        assert await slow_head(reader, writer) < 50


async def test_a_body_is_not_taken_for_the_next_head(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits(header_timeout=0.5, max_head_bytes=100, idle_timeout=30)) as served:
        reader, writer = await served.connect()
        body = b"\r\n\r\n".join([b"x" * 150] * 3)  # longer than a head may be, with empty lines in it
        writer.write(b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await reader.readuntil(b"ok")
        assert await answer(reader, writer) == b"HTTP/1.1 200 OK"
        assert not await closed_by_server(reader, 1.0)  # past the header timeout: no head is pending
        writer.close()


async def test_pipelined_requests_are_each_answered(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits(header_timeout=0.5, idle_timeout=30)) as served:
        reader, writer = await served.connect()
        writer.write(REQUEST * 3)
        for _ in range(3):
            await asyncio.wait_for(reader.readuntil(b"ok"), 10)
        assert not await closed_by_server(reader, 1.0)
        writer.close()


async def test_a_head_over_the_size_limit_is_answered_431_and_closed(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits(max_head_bytes=1024)) as served:
        reader, writer = await served.connect()
        assert await answer(reader, writer) == b"HTTP/1.1 200 OK"
        writer.write(b"GET / HTTP/1.1\r\n" + b"".join(b"X-Big-%d: %s\r\n" % (i, b"v" * 100) for i in range(10)))
        assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.1 431 ")
        writer.close()


async def test_a_chunked_body_is_answered_411_and_closed(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits()) as served:
        reader, writer = await served.connect()
        writer.write(b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + REQUEST)
        assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.1 411 ")
        writer.close()


@pytest.mark.parametrize(
    ("line", "status"),
    [
        (b"GET /\r\n", b"HTTP/1.1 400 "),  # what aiohttp took for HTTP/0.9 and answered
        (b"GET / HTTP/0.9\r\n", b"HTTP/1.1 505 "),
        (b"GET / HTTP/2.0\r\n", b"HTTP/1.1 505 "),
        (b"GET  / HTTP/1.1\r\n", b"HTTP/1.1 400 "),
        (b"GET / HTTP/1.1 \r\n", b"HTTP/1.1 400 "),
    ],
)
async def test_a_request_line_without_http_1_is_refused_before_it_is_parsed(
    tmp_path: Path, line: bytes, status: bytes
) -> None:
    async with serve(tmp_path, Limits(), tls=False) as served:
        reader, writer = await served.connect()
        writer.write(line + b"Host: a\r\n\r\n")
        assert (await asyncio.wait_for(reader.read(), 10)).startswith(status)
        writer.close()


async def test_http_1_0_is_still_answered(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits(), tls=False) as served:
        reader, writer = await served.connect()
        writer.write(b"GET / HTTP/1.0\r\n\r\n")
        assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.0 200 OK")
        writer.close()


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (b"Authorization: Bearer secret\x01token", b"Invalid header value char"),
        (b"Bad Name: Bearer secret", b"Invalid header token"),
    ],
)
async def test_a_head_the_parser_refuses_is_answered_400_without_quoting_it(
    tmp_path: Path, header: bytes, reason: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve(tmp_path, Limits()) as served:
        reader, writer = await served.connect()
        writer.write(b"GET / HTTP/1.1\r\nHost: a\r\n" + header + b"\r\nX-Token: secret\r\n\r\n")
        answer_ = await asyncio.wait_for(reader.read(), 10)
        writer.close()
    assert answer_.startswith(b"HTTP/1.0 400 Bad Request\r\n")
    assert answer_.endswith(b"\r\n\r\n400 Bad Request: " + reason + b"\n")
    assert b"secret" not in answer_
    assert not [r for r in caplog.records if r.exc_info], "a client's mistake is no traceback"


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits(idle_timeout=1)) as served:
        reader, writer = await served.connect()
        assert await answer(reader, writer) == b"HTTP/1.1 200 OK"
        assert await closed_by_server(reader, 15)
        writer.close()


async def test_a_connection_that_never_starts_its_handshake_is_closed(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits(handshake_timeout=0.5)) as served:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        assert await closed_by_server(reader, 15)
        writer.close()
        await wait_until(lambda: served.site.open == 0, what="the connection to be counted as closed")


async def test_connections_beyond_the_limit_are_refused_while_earlier_ones_hold_certificates(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits(max_connections=3)) as served:
        kept = [await served.connect(certified=True) for _ in range(3)]
        for reader, writer in kept:
            assert await answer(reader, writer) == b"HTTP/1.1 200 OK"
        assert served.site.open == 3
        for _ in range(3):
            try:
                reader, writer = await served.connect()
            except (OSError, ssl.SSLError):
                continue  # refused before the handshake finished
            assert await closed_by_server(reader, 10)
            writer.close()
        # the three open ones are still served
        for reader, writer in kept:
            assert await answer(reader, writer) == b"HTTP/1.1 200 OK"
        kept[0][1].close()
        await wait_until(lambda: served.site.open == 2, what="a slot to free up")
        reader, writer = await served.connect()
        assert await answer(reader, writer) == b"HTTP/1.1 200 OK"
        writer.close()
        for _, w in kept[1:]:
            w.close()


async def test_at_the_limit_a_new_connection_takes_the_place_of_the_oldest_idle_one_without_a_certificate(
    tmp_path: Path,
) -> None:
    """Strangers who send a request now and then and keep their connections cannot shut out the probes or a newcomer;
    the aggregator's connection, which presents its front-proxy certificate, is never the one closed for them."""
    async with serve(tmp_path, Limits(max_connections=3)) as served:
        aggregator = await served.connect(certified=True)
        assert await answer(*aggregator) == b"HTTP/1.1 200 OK"
        strangers = [await served.connect() for _ in range(2)]
        for stranger in strangers:
            assert await answer(*stranger) == b"HTTP/1.1 200 OK"  # then they idle, keeping their connections
        for _ in range(4):  # probes, each on a new connection
            probe = await served.connect()
            assert await answer(*probe) == b"HTTP/1.1 200 OK"
            strangers.append(probe)
        for reader, _ in strangers[:-2]:  # the oldest idle ones made room, in turn
            assert await closed_by_server(reader, 10)
        assert await answer(*aggregator) == b"HTTP/1.1 200 OK"  # still open, through every newcomer
        for _, w in (aggregator, *strangers):
            w.close()


async def test_a_connection_answering_a_request_is_not_closed_to_make_room(tmp_path: Path) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        entered.set()
        await release.wait()
        return web.Response(text="ok")

    async with serve(tmp_path, Limits(max_connections=1), tls=False, slow=slow) as served:
        reader, writer = await served.connect()
        writer.write(b"GET /slow HTTP/1.1\r\nHost: adapter\r\n\r\n")
        await asyncio.wait_for(entered.wait(), 10)
        other_reader, other_writer = await served.connect()
        assert await closed_by_server(other_reader, 10)  # refused: the only connection is being answered
        other_writer.close()
        release.set()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200 OK")
        writer.close()


async def test_plain_http_has_the_same_bounds(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits(header_timeout=0.5, max_connections=1), tls=False) as served:
        reader, writer = await served.connect()
        assert await answer(reader, writer) == b"HTTP/1.1 200 OK"
        other_reader, other_writer = await served.connect()
        assert await answer(other_reader, other_writer) == b"HTTP/1.1 200 OK"  # it took the idle one's place
        assert await closed_by_server(reader, 10)
        other_writer.close()
        writer.close()
        await wait_until(lambda: served.site.open == 0, what="the connection to close")
        reader, writer = await served.connect()
        writer.write(b"GET / HTTP/1.1\r\n")
        assert await closed_by_server(reader, 15)  # no complete head
        writer.close()


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
async def test_at_the_limit_a_new_connection_takes_the_place_of_the_oldest_that_sent_no_request(
    tmp_path: Path, tls: bool
) -> None:
    """A flood of strangers who connect and send nothing (or half a head) cannot shut out a caller that asks."""
    async with serve(tmp_path, Limits(max_connections=4), tls=tls) as served:
        reader, writer = await served.connect()
        assert await answer(reader, writer) == b"HTTP/1.1 200 OK"  # a caller with a request: never made room for
        strangers = []
        for n in range(20):  # idle TCP connections: no TLS hello, no head
            strangers.append(await asyncio.open_connection("127.0.0.1", served.port))
            if n == 0:
                strangers[0][1].write(b"GET / HTTP/1.1\r\n")  # half a head
        await wait_until(lambda: served.site.open <= 4, what="the oldest strangers to be closed")
        # the oldest strangers were closed to make room, the newest three are still open
        for stranger_reader, _ in strangers[:-3]:
            assert await closed_by_server(stranger_reader, 10)
        new_reader, new_writer = await served.connect()
        assert await answer(new_reader, new_writer) == b"HTTP/1.1 200 OK"  # it found room
        assert await answer(reader, writer) == b"HTTP/1.1 200 OK"  # the first caller still has its connection
        for w in (writer, new_writer, *(w for _, w in strangers)):
            w.close()


async def test_freed_memory_is_handed_back_after_a_burst_of_closes(tmp_path: Path) -> None:
    async with serve(tmp_path, Limits()) as served:
        for _ in range(TRIM_AFTER_CLOSES):
            reader, writer = await served.connect()
            assert await answer(reader, writer) == b"HTTP/1.1 200 OK"
            writer.close()
            await writer.wait_closed()
        await wait_until(lambda: served.trims != [], what="freed memory to be handed back")
        assert served.trims == [0]  # once for the burst, when all of it had closed
