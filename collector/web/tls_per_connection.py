"""A server's TLS settings chosen afresh for every connection, as Go's ``tls.Config.GetConfigForClient`` does.

A listening socket keeps the one ``SSLContext`` it was given. Swapping it in an SNI callback (``SSLObject.context``)
brings the new certificate and CA store but not the rest: OpenSSL copies the verify mode, the protocol versions, the
options and the groups into each connection before that callback runs. asyncio makes every server connection with
``context.wrap_bio``, so a context whose ``wrap_bio`` hands the connection the newest context changes all of it.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any


class PerConnectionContext(ssl.SSLContext):
    """Give it to the server as its ``ssl`` context; each new connection gets ``current()``'s context."""

    _current: Callable[[], ssl.SSLContext]

    def __new__(cls, current: Callable[[], ssl.SSLContext]) -> PerConnectionContext:
        context = super().__new__(cls, ssl.PROTOCOL_TLS_SERVER)
        context._current = current
        return context

    def __init__(self, current: Callable[[], ssl.SSLContext]) -> None:
        pass  # made in __new__: ssl.SSLContext takes its protocol there

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self._current().wrap_bio(incoming, outgoing, server_side, server_hostname, session)

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        return self._current().wrap_socket(sock, *args, **kwargs)
