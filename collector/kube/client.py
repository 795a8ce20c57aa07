"""The collector's Kubernetes API client: a GET answered in full, and a watch read line by line, over aiohttp.

The collector's reads are few and fixed (a LIST and WATCH of its node's pods and ResourceSlices, a GET of the
counters ConfigMap), so this is all of its client: aiohttp is loaded anyway for the server, where a general client
library costs more resident memory than the rest of the collector (docs/collector-bench.md, memory). Answers are
handed back as bytes for the caller to decode as JSON.

Errors leave as ``KubeApiError`` (an error status, with the ``Status`` message the API server sent) or
``KubeUnreachable`` (no complete answer: connection, TLS, time, a stream cut short; the library's error named in it),
and ``ConfigError`` when the credentials or certificates cannot be used. A 401 makes the next request read the token
again (``credentials.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from types import TracebackType

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError

from collector.errors import KubeApiError, KubeError, KubeUnreachable
from collector.kube.config import KubeConfig
from collector.kube.credentials import Credentials
from collector.kube.tls import Tls

JSON = "application/json"
MAX_EVENT_BYTES = 16 * 1024 * 1024  # one watch event: an object may be 1.5 MB in etcd, and is larger as JSON
_MAX_STATUS_BYTES = 64 * 1024  # an error's Status, read for its message


class WatchStream:
    """An open watch: its lines as the API server writes them (one JSON event each), until it ends the watch."""

    def __init__(self, response: aiohttp.ClientResponse, what: str) -> None:
        self._response = response
        self._what = what

    async def lines(self) -> AsyncIterator[bytes]:
        content = self._response.content
        try:
            while line := await content.readuntil(b"\n", max_size=MAX_EVENT_BYTES):
                yield line
        except HttpProcessingError:  # LineTooLong; its text would quote the event
            raise KubeError(f"{self._what}: a watch event over {MAX_EVENT_BYTES // 2**20} MiB") from None
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise KubeUnreachable(f"{self._what}: {_said(e)}") from None

    def close(self) -> None:
        self._response.release()

    async def __aenter__(self) -> WatchStream:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


class KubeClient:
    def __init__(self, config: KubeConfig, credentials: Credentials | None = None, tls: Tls | None = None) -> None:
        """``credentials`` and ``tls`` default to those of ``config``. The session opens with the first request,
        on the event loop that makes it; ``close`` ends it."""
        self.config = config
        self._credentials = credentials or Credentials(config)
        self._tls = tls or Tls(config)
        self._https = config.server.startswith("https:")
        self._session: aiohttp.ClientSession | None = None

    async def get(self, path: str, params: Mapping[str, str], within: float, accept: str = JSON) -> bytes:
        """The body of a 2xx answer to GET ``path``, read in full within ``within`` seconds."""
        what = f"GET {path}"
        try:
            async with asyncio.timeout(within):
                response = await self._request(path, params, aiohttp.ClientTimeout(total=None), accept)
                try:
                    await self._check(response)
                    return await response.read()
                finally:
                    response.release()
        except TimeoutError:
            raise KubeUnreachable(f"{what}: no answer within {within:g}s") from None
        except (aiohttp.ClientError, OSError) as e:
            raise KubeUnreachable(f"{what}: {_said(e)}") from None

    async def watch(self, path: str, params: Mapping[str, str], read_timeout: float, accept: str = JSON) -> WatchStream:
        """An open watch of ``path`` (``params`` say from which version and for how long); its head has come. A read
        silent for ``read_timeout`` seconds ends it with ``KubeUnreachable``; the caller bounds the wait for the
        head."""
        limit = aiohttp.ClientTimeout(total=None, sock_read=read_timeout)
        try:
            response = await self._request(path, params, limit, accept)
        except (aiohttp.ClientError, OSError) as e:
            raise KubeUnreachable(f"watch {path}: {_said(e)}") from None
        try:
            await self._check(response)
        except BaseException:
            response.release()
            raise
        return WatchStream(response, f"watch {path}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(
        self, path: str, params: Mapping[str, str], limits: aiohttp.ClientTimeout, accept: str
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": accept, "User-Agent": "gpuscale-collector"}
        authorization = await self._credentials.authorization()
        if authorization is not None:
            headers["Authorization"] = authorization
        if self._session is None:
            # one connection is enough for requests made one after the other; a watch holds a second
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4))
        return await self._session.get(
            self.config.server + path, params=params, headers=headers, timeout=limits,
            ssl=self._tls.context() if self._https else True, server_hostname=self.config.tls_server_name,
        )  # fmt: skip

    async def _check(self, response: aiohttp.ClientResponse) -> None:
        if response.status < 400:
            return
        if response.status == 401:
            self._credentials.rejected()
        message = ""
        try:
            body = b""
            while len(body) < _MAX_STATUS_BYTES and (more := await response.content.read(_MAX_STATUS_BYTES)):
                body += more
            status = json.loads(body)
            if isinstance(status, dict):
                message = str(status.get("message") or "")
        except (ValueError, aiohttp.ClientError, OSError, TimeoutError):
            pass  # the status code says enough
        raise KubeApiError(response.status, response.reason or "", message)


def _said(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
