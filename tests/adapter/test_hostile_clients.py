"""``python -m adapter`` as deployed (TLS, authentication on) against clients that send malformed or slow requests:
what its log keeps of them, and how long it keeps their connections."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from harness.adapter.process import AdapterProcess, secure_adapter
from harness.kube.api import FakeKubeAPIServer
from harness.stores.prometheus import Prometheus

TOKEN = "secret-token"
MALFORMED = [
    f"GET /apis HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {TOKEN}\x00\r\n\r\n".encode(),
    f"GET /apis HTTP/1.1\r\nHost: a\r\nAuthorization : Bearer {TOKEN}\r\n\r\n".encode(),
    f"GET /apis HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {TOKEN * 1000}\r\n\r\n".encode(),
    f"GET /apis HTTP/1.1\r\nHost: a\r\nContent-Length: {TOKEN}\r\n\r\n".encode(),
    f"GET /apis HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {TOKEN}\r\n\r\n".encode(),
    f"GET /\x00{TOKEN} HTTP/1.1\r\nHost: a\r\n\r\n".encode(),
    f"GET /apis HTTP/1.1\r\nHost: a\r\n{TOKEN}\r\n\r\n".encode(),
    f"{TOKEN} /apis HTTP/1.1\r\n\r\n".encode(),
]


async def send(adapter: AdapterProcess, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(adapter.host, adapter.port, ssl=adapter.context())
    writer.write(raw)
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


@pytest.mark.parametrize("verbosity", ["2", "4"])
async def test_malformed_requests_never_put_their_bytes_in_the_log(
    kube: FakeKubeAPIServer, prometheus: Prometheus, tmp_path: Path, verbosity: str
) -> None:
    async with secure_adapter(kube, prometheus.url, tmp_path, f"--v={verbosity}") as adapter:
        lines_before = len(adapter.log.read_text().splitlines())
        for _ in range(50):
            answers = await asyncio.gather(*(send(adapter, raw) for raw in MALFORMED))
            # 400 from aiohttp's parser; 411 for the transfer coding, from the adapter's own framing
            assert all(a.split(b" ")[1] in (b"400", b"411") for a in answers), answers
        # the adapter still answers
        assert (await send(adapter, b"GET /livez HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")).startswith(
            b"HTTP/1.1 200 OK"
        )
        log = adapter.log.read_text()
    assert TOKEN not in log
    if verbosity == "2":
        # 400 malformed requests of a few kinds: a line for each kind, not one for each request
        assert len(log.splitlines()) - lines_before <= len(MALFORMED)
        assert "Traceback" not in log


async def slowloris(adapter: AdapterProcess, lines: int, every: float) -> int:
    """A request head sent one header line every ``every`` seconds; how many lines went before the adapter closed
    the connection (``lines`` if it never did)."""
    reader, writer = await asyncio.open_connection(adapter.host, adapter.port, ssl=adapter.context())
    writer.write(b"GET /apis HTTP/1.1\r\nHost: a\r\n")
    try:
        for line in range(lines):
            try:
                data = await asyncio.wait_for(reader.read(1), every)
            except TimeoutError:
                writer.write(f"X-Slow-{line}: {line}\r\n".encode())
                continue
            except (OSError, ssl.SSLError):
                data = b""
            assert data == b"", "the adapter answered an incomplete head"
            return line
        return lines
    finally:
        writer.close()


async def test_slow_request_heads_are_cut_off_and_said_once(
    kube: FakeKubeAPIServer, prometheus: Prometheus, tmp_path: Path
) -> None:
    async with secure_adapter(kube, prometheus.url, tmp_path, limits={"header_timeout": 1.0}) as adapter:
        sent = await asyncio.gather(*(slowloris(adapter, lines=50, every=0.2) for _ in range(20)))
        # each would have taken 10 s; each was closed before it got there
        assert max(sent) < 50
        log = adapter.log.read_text()
    assert log.count("sent no complete request head within 1s") == 1
