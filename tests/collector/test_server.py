import asyncio
import contextlib
import logging
import re
import socket
from collections.abc import Awaitable, Callable

import pynvml
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from collector.collection import Collection
from collector.counters.source import CountersFile
from collector.nvml.reader import NvmlReader
from collector.server import answer_for
from collector.web.messages import Answer, Request, Response, text
from collector.web.send_budget import SendBudget
from collector.web.server import HttpServer
from common.listener import Limits
from harness.node.nvml_trace import ReplayNvml
from harness.node.served import Served
from harness.waiting import wait_until

Serve = Callable[[Answer], Awaitable[Served]]


def pre_4_9_counters() -> CountersFile:
    """The built-in counters in dcgm-exporter 4.8's names, which these tests read (the 4.10 names:
    test_dcgm_exporter_contract.py)."""
    return CountersFile(None, "pre-4.9")


async def test_metrics_in_text_and_openmetrics(serve: Serve, h200: ReplayNvml) -> None:
    collection = Collection(NvmlReader(h200), pre_4_9_counters())
    collection.run_once()
    client = await serve(answer_for(collection))
    status, headers, text = await client.get("/metrics")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert int(headers["Content-Length"]) == len(text.encode())
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    status, headers, text = await client.get("/metrics", Accept="application/openmetrics-text;version=1.0.0")
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    names = {f.name for f in parse_openmetrics(text)}  # type: ignore[no-untyped-call]
    assert "DCGM_FI_DEV_GPU_UTIL" in names
    assert (await client.get("/health"))[0] == 200


async def test_health_is_503_with_the_reason_while_nvml_is_down(serve: Serve) -> None:
    nvml = ReplayNvml.load("h200")
    nvml.fail("nvmlInit", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    collection = Collection(NvmlReader(nvml), pre_4_9_counters())
    collection.run_once()
    client = await serve(answer_for(collection))
    status, _, text = await client.get("/health")
    assert status == 503
    assert "NVML did not start: LibraryNotFound" in text
    assert "without NVIDIA GPUs, --simulate-gpus N serves N simulated ones" in text  # how to run here anyway
    status, _, text = await client.get("/metrics")  # still answers, with the collector's own series
    assert status == 200
    assert "gpuscale_collector_nvml_up 0" in text
    assert (await client.get("/nope"))[:1] == (404,)


async def exchange(served: Served, raw: bytes) -> bytes:
    """``raw`` sent on a new connection; all the server writes until it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", served.server.port)
    try:
        writer.write(raw)
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        await writer.wait_closed()


def index_only(body: bytes = b"ok\n") -> Answer:
    async def answer(request: Request) -> Response:
        if request.path != "/":
            return text(404, "404: Not Found")
        return Response(200, body, {"Content-Type": "text/plain"})

    return answer


async def test_head_get_and_method_not_allowed(serve: Serve, h200: ReplayNvml) -> None:
    collection = Collection(NvmlReader(h200), pre_4_9_counters())
    collection.run_once()
    client = await serve(answer_for(collection))
    async with client.session.head(client.url + "/metrics") as response:
        assert response.status == 200
        length = int(response.headers["Content-Length"])
        assert await response.read() == b""
    assert length == len(collection.latest.text())  # the length a GET would have
    async with client.session.post(client.url + "/metrics", data=b"x") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "GET, HEAD"
        assert await response.text() == "405: Method Not Allowed"


async def test_one_connection_answers_requests_one_after_the_other_and_pipelined(serve: Serve) -> None:
    served = await serve(index_only())
    one = b"GET / HTTP/1.1\r\nHost: c\r\n\r\n"
    last = b"GET / HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n"
    out = await exchange(served, one + one + last)  # all three sent before the first answer
    assert out.count(b"HTTP/1.1 200 OK\r\n") == 3
    assert out.count(b"\r\n\r\nok\n") == 3
    assert out.endswith(b"ok\n")


async def test_http_1_0_gets_its_answer_and_the_connection_closes(serve: Serve) -> None:
    out = await exchange(await serve(index_only()), b"GET / HTTP/1.0\r\n\r\n")
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Content-Length: 3" in head
    assert body == b"ok\n"


async def test_a_head_that_cannot_be_parsed_is_400_quoting_nothing(serve: Serve) -> None:
    secret = b"Bearer s3cret\x01"
    out = await exchange(
        await serve(index_only()), b"GET / HTTP/1.1\r\nHost: c\r\nAuthorization: " + secret + b"\r\n\r\n"
    )
    assert out.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert out.endswith(b"\r\n\r\n400 Bad Request: malformed request\n")
    assert b"s3cret" not in out


async def test_a_request_without_host_is_400_as_go_answers_it(serve: Serve) -> None:
    out = await exchange(await serve(index_only()), b"GET / HTTP/1.1\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 Bad Request\r\n")


async def test_an_idle_connection_is_closed_after_the_idle_timeout() -> None:
    server = HttpServer(index_only(), "127.0.0.1", 0, limits=Limits(idle_timeout=0.2))
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET / HTTP/1.1\r\nHost: c\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert await asyncio.wait_for(reader.read(), 10) == b"ok\n"  # then the end: the server closed it
        writer.close()
        await writer.wait_closed()
    finally:
        await server.stop()


async def test_stopping_sends_the_answer_in_progress_then_closes() -> None:
    release = asyncio.Event()

    async def slow(request: Request) -> Response:
        await release.wait()
        return text(200, "late\n")

    server = HttpServer(slow, "127.0.0.1", 0)
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: c\r\n\r\n")
    await wait_until(lambda: server.listener.open == 1 and not server.listener.handlers()[0].idle)
    stopping = asyncio.create_task(server.stop(grace=10))
    await asyncio.sleep(0.05)
    with pytest.raises(ConnectionRefusedError):  # no new connections
        await asyncio.open_connection("127.0.0.1", server.port)
    release.set()
    out = await asyncio.wait_for(reader.read(), 10)
    assert out.startswith(b"HTTP/1.1 200 OK\r\n")
    assert out.endswith(b"\r\n\r\nlate\n")
    await stopping
    assert server.listener.open == 0
    writer.close()
    await writer.wait_closed()


async def test_an_answer_that_fails_is_500_and_logged(serve: Serve, caplog: pytest.LogCaptureFixture) -> None:
    async def broken(request: Request) -> Response:
        raise ZeroDivisionError("division by zero")

    client = await serve(broken)
    status, _, body = await client.get("/")
    assert (status, body) == (500, "500: Internal Server Error\n")
    assert any(r.getMessage() == "GET / failed" and r.exc_info for r in caplog.records)


async def test_a_client_that_sends_its_request_and_half_closes_gets_its_answer(serve: Serve) -> None:
    served = await serve(index_only())
    reader, writer = await asyncio.open_connection("127.0.0.1", served.server.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: c\r\n\r\n")
    writer.write_eof()
    out = await asyncio.wait_for(reader.read(), 10)
    assert out.startswith(b"HTTP/1.1 200 OK\r\n")
    assert out.endswith(b"\r\n\r\nok\n")
    writer.close()
    await writer.wait_closed()


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.1\r\nHost: c\r\nContent-Length: 10\r\n\r\n",  # the body never comes
        b"POST / HTTP/1.1\r\nHost: c\r\nContent-Length: 10\r\n\r\nabc",  # a part of it
        b"POST / HTTP/1.1\r\nHost: c\r\nContent-Length: 2000000\r\nExpect: 100-continue\r\n\r\n",  # waits for a 100
    ],
)
async def test_a_request_with_a_body_is_answered_at_its_head_and_the_connection_closed(
    serve: Serve, head: bytes
) -> None:
    # no path takes a body: the answer does not wait for one (which could never come), as Go's server answers
    served = await serve(index_only())
    reader, writer = await asyncio.open_connection("127.0.0.1", served.server.port)
    try:
        writer.write(head)
        out = await asyncio.wait_for(reader.read(), 5)  # the whole answer, then the server's end of the connection
    finally:
        writer.close()
        await writer.wait_closed()
    assert out.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nConnection: close" in out.partition(b"\r\n\r\n")[0]
    await wait_until(lambda: served.server.listener.open == 0)


async def test_a_body_still_coming_after_the_answer_is_read_and_dropped_not_reset(serve: Serve) -> None:
    served = await serve(index_only())
    reader, writer = await asyncio.open_connection("127.0.0.1", served.server.port)
    writer.write(b"POST / HTTP/1.1\r\nHost: c\r\nContent-Length: 1000000\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    for _ in range(10):  # the client goes on sending its body after the answer came
        writer.write(b"x" * 65536)
        await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5) == b"ok\n"  # not cut by a reset
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    writer.close()
    await writer.wait_closed()


async def test_a_client_that_pipelines_without_reading_holds_one_buffer_not_an_answer_each() -> None:
    big = b"x" * 200_000
    answered = 0

    async def large(request: Request) -> Response:
        nonlocal answered
        answered += 1
        return Response(200, big, {"Content-Type": "text/plain"})

    server = HttpServer(large, "127.0.0.1", 0)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET / HTTP/1.1\r\nHost: c\r\n\r\n" * 2000)  # 400 MB of answers if each were written at once
        await asyncio.sleep(1.0)
        assert answered < 50  # the answers wait for the client to read: all 2,000 would take a second otherwise
        received = 0
        while received < 10 * len(big):  # reading lets the next answers go out
            received += len(await asyncio.wait_for(reader.read(1 << 20), 5))
        assert answered >= 10
        writer.close()
        await writer.wait_closed()
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n", b"200 OK"),  # absolute form
        (b"\r\nGET / HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n", b"200 OK"),  # an empty line before it
        (b"GET / HTTP/1.1\r\nHost: c\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", b"400 Bad Request"),
        # a folded line is part of the field above it, not a Content-Length: no body follows, and the next
        # request's line is checked as a request line
        (b"GET / HTTP/1.1\r\nHost: c\r\nX-A: 1\r\n Content-Length: 100\r\n\r\nGET / HTTP/2.0\r\n\r\n",
         b"505 HTTP Version Not Supported"),
    ],
)  # fmt: skip
async def test_request_forms_rfc_9112_allows_or_refuses(
    serve: Serve, raw: bytes, status: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    out = await exchange(await serve(index_only()), raw)
    assert re.findall(rb"HTTP/1\.1 (\d{3} [^\r]*)\r\n", out)[-1] == status
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def _not_reading(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection whose client reads nothing until told, with a small receive window: the system holds little of
    an answer, the server's write buffer the rest."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock)


async def _all_read(reader: asyncio.StreamReader) -> bytes:
    """What comes until the connection ends, closed or cut."""
    out = b""
    with contextlib.suppress(ConnectionError):
        while data := await asyncio.wait_for(reader.read(2**20), 30):
            out += data
    return out


def _holds(budget: SendBudget, more_than: float) -> Callable[[], bool]:
    return lambda: budget.held > more_than


def page_of(body: bytes) -> Answer:
    async def page(request: Request) -> Response:
        return Response(200, body, {"Content-Type": "text/plain"})

    return page


async def test_answers_clients_do_not_read_hold_at_most_the_send_budget_and_the_oldest_makes_room() -> None:
    # the red team's 900 connections reading nothing kept a 393 KB page each: 31 → 349 MiB
    page = b"x" * 8 * 2**20
    budget = SendBudget(limit=2 * len(page), write_timeout=600)
    server = HttpServer(page_of(page), "127.0.0.1", 0, budget=budget)
    await server.start()
    try:
        unread = []
        for count in (1, 2):
            unread.append(await _not_reading(server.port))
            unread[-1][1].write(b"GET /metrics HTTP/1.1\r\nHost: c\r\n\r\n")
            await wait_until(_holds(budget, (count - 0.5) * len(page)), what="the answer left unread")
        assert server.listener.open == 2
        scraper = await _not_reading(server.port)  # reads, but only once the server has answered
        scraper[1].write(b"GET /metrics HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n")
        await wait_until(lambda: budget.cut == 1, what="the oldest unread answer's connection cut")
        answered = await asyncio.wait_for(scraper[0].read(), 30)
        assert answered.startswith(b"HTTP/1.1 200 OK\r\n")
        assert answered.endswith(page)
        assert budget.peak <= budget.limit
        assert len(await _all_read(unread[0][0])) < len(page)  # the first client's answer was cut short
        head = await asyncio.wait_for(unread[1][0].readuntil(b"\r\n\r\n"), 10)  # the second's is still there
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert await asyncio.wait_for(unread[1][0].readexactly(len(page)), 30) == page
        await wait_until(lambda: budget.held == 0, what="the room given back once the answers are read")
        for _, writer in (*unread, scraper):
            writer.close()
    finally:
        await server.stop()


async def test_a_connection_whose_answer_is_not_read_within_the_write_timeout_is_cut() -> None:
    budget = SendBudget(write_timeout=0.2)
    server = HttpServer(page_of(b"x" * 16 * 2**20), "127.0.0.1", 0, budget=budget)
    await server.start()
    try:
        _, writer = await _not_reading(server.port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: c\r\n\r\n")
        await wait_until(lambda: budget.held > 0, what="the answer left unread in the write buffer")
        await wait_until(lambda: server.listener.open == 0, what="the connection cut")
        assert budget.held == 0
        writer.close()
    finally:
        await server.stop()


async def test_what_the_system_holds_of_an_unread_answer_is_bounded_and_the_rest_counted() -> None:
    # Linux takes up to 4 MiB of a connection's answer into its send buffer, charged to the pod's memory: a 1 MiB page
    # left unread was held there whole, out of the budget's sight
    budget = SendBudget(write_timeout=600)
    server = HttpServer(page_of(b"x" * 2**20), "127.0.0.1", 0, budget=budget)
    await server.start()
    try:
        reader, writer = await _not_reading(server.port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: c\r\n\r\n")
        await wait_until(lambda: budget.held > 2**20 - 256 * 1024, what="most of the page left in the write buffer")
        await asyncio.wait_for(reader.readexactly(2**20), 30)
        await wait_until(lambda: budget.held == 0, what="the room given back once the page is read")
        writer.close()
    finally:
        await server.stop()
