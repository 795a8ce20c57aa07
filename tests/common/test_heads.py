"""The request framing ``common/heads.py`` follows ahead of aiohttp's parser."""

from __future__ import annotations

import pytest

from common.heads import body_length, head_end


@pytest.mark.parametrize(
    ("buffer", "start", "end"),
    [
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0, 27),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\n\r\n", 0, 27),
        (b"GET / HTTP/1.1\r\nHost: a\r\n", 0, -1),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r", 0, -1),
        (b"GET / HTTP/1.1\nHost: a\n\n", 0, 24),
        (b"GET / HTTP/1.1\r\n\r\n", 14, 18),
        (b"GET / HTTP/1.1\r\n\r\n", 15, 18),
        (b"", 0, -1),
    ],
)
def test_where_a_head_ends(buffer: bytes, start: int, end: int) -> None:
    assert head_end(buffer, start) == end


@pytest.mark.parametrize(
    ("head", "length"),
    [
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0),
        (b"POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n", 12),
        (b"POST / HTTP/1.1\r\ncontent-length:7\r\n\r\n", 7),
        (b"POST / HTTP/1.1\r\nCONTENT-LENGTH :  7 \r\n\r\n", 7),
        (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 0),
        (b"POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", 0),
        (b"POST / HTTP/1.1\r\nX-Content-Length: 5\r\n\r\n", 0),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", None),
        (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: gzip\r\n\r\n", None),
        (b"GET /content-length:5 HTTP/1.1\r\n\r\n", 0),
    ],
)
def test_how_long_the_body_is(head: bytes, length: int | None) -> None:
    assert body_length(head) == length
