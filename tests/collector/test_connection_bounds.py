"""The collector's server takes connections as the adapter's does (common/listener.py), plain and with TLS: a head
too long is answered 431, one too slow is closed, a TLS handshake that never comes is closed, and connections past
the cap are closed as they are accepted. Before, anyone who reached :9400 could hold unfinished heads and TLS
buffers without bound (200 connections with 1 MB heads took the collector from 110 to 479 MiB)."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.node.collector_process import ROOT, running_collector, scrape
from harness.node.web_config import tls_web_config

LONG_HEAD = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"".join(
    b"X-Fill-%d: %s\r\n" % (n, b"a" * 1000) for n in range(100)
)
# a liveness guard only: every answer expected here comes at once, or after a one-second limit
WAIT = 20.0


def connect(url: str) -> socket.socket:
    parts = urllib.parse.urlsplit(url)
    assert parts.port is not None
    return socket.create_connection(("127.0.0.1", parts.port), timeout=WAIT)


@contextmanager
def opened(url: str, secure: bool) -> Iterator[socket.socket]:
    """A connection to the collector, TLS when it serves TLS (its certificate is not checked here)."""
    with connect(url) as raw:
        if not secure:
            yield raw
            return
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with context.wrap_socket(raw) as sock:
            yield sock


def answer(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


@pytest.fixture
def web_config(tmp_path: Path) -> Path:
    return tls_web_config(tmp_path)


@pytest.fixture(params=["http", "https"])
def collector(request: pytest.FixtureRequest, web_config: Path) -> Iterator[tuple[str, bool]]:
    secure = request.param == "https"
    args = ["--simulate-gpus", "1", *(["--web-config-file", str(web_config)] if secure else [])]
    limits = {"max_connections": 3, "header_timeout": 1.0, "handshake_timeout": 1.0}
    with running_collector(*args, limits=limits, scheme=request.param) as url:
        yield url, secure


def test_a_head_over_the_limit_is_answered_431_and_closed(collector: tuple[str, bool]) -> None:
    url, secure = collector
    with opened(url, secure) as sock:
        sock.sendall(LONG_HEAD)  # 100 KB, no end: aiohttp alone waits for more for as long as the client likes
        assert answer(sock).startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")


def test_a_head_that_does_not_arrive_in_time_is_closed_without_an_answer(collector: tuple[str, bool]) -> None:
    url, secure = collector
    with opened(url, secure) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        assert answer(sock) == b""


def test_connections_past_the_cap_are_closed_and_the_scraper_is_served_after(collector: tuple[str, bool]) -> None:
    url, secure = collector
    held = [connect(url) for _ in range(3)]  # idle: never a byte, not even a TLS hello
    try:
        with connect(url) as extra:
            assert extra.recv(1) == b""  # closed at accept, before any TLS work
        for sock in held:  # each closed by the handshake's or the first head's deadline
            assert sock.recv(1) == b""
    finally:
        for sock in held:
            sock.close()
    body, _ = scrape_any(url, secure)
    assert "DCGM_FI_DEV_GPU_UTIL" in body


def scrape_any(url: str, secure: bool) -> tuple[str, str]:
    if not secure:
        return scrape(url)
    with opened(url, secure) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head, _, body = answer(sock).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return body.decode(), ""


def test_a_port_in_use_is_one_line_naming_the_address_and_the_flag(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "collector", "--simulate-gpus", "1", "-a", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60, cwd=ROOT,
        )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"gpuscale-collector: error: cannot listen on 127.0.0.1:{port} (-a, --address): address already in use"
    )
    assert "Traceback" not in done.stderr
