"""Names that are not valid UTF-8, sent by the front proxy as raw header bytes: they are reviewed and answered like
any other name (invalid bytes become U+FFFD, as Kubernetes' JSON encoding makes them), never a 500."""

from __future__ import annotations

import asyncio
import json

from harness.adapter.in_process import MakeSecure
from harness.kube.cluster import HPA_REQUEST, Cluster


async def raw_get(url: str, ssl_context: object, path: str, headers: list[bytes]) -> tuple[int, bytes]:
    host, _, port = url.removeprefix("https://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port), ssl=ssl_context)
    head = b"\r\n".join([f"GET {path} HTTP/1.1".encode(), f"Host: {host}".encode(), *headers, b"Connection: close"])
    writer.write(head + b"\r\n\r\n")
    await writer.drain()
    answer = await reader.read()
    writer.close()
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2]


async def test_a_front_proxy_user_name_with_invalid_utf8_is_denied_with_a_403_not_a_500(
    make_secure: MakeSecure, cluster: Cluster
) -> None:
    adapter = await make_secure()
    headers = [b"X-Remote-User: tr\xffiner\xc3", b"X-Remote-Group: dev\xfe", b"X-Remote-Extra-Scopes: a\xff"]
    status, body = await raw_get(adapter.url, adapter.context(cluster.front_proxy), HPA_REQUEST, headers)
    assert status == 403, body
    answer = json.loads(body)
    assert answer["kind"] == "Status"
    assert 'User "tr\ufffdiner\ufffd" cannot get resource' in answer["message"]
