"""aiohttp's connection handler, with answers to requests its parser refuses that quote nothing back.

aiohttp answers a head it cannot parse with 400 and the parser's message as the body, which quotes the offending
line: an ``Authorization`` header with a stray control character comes back to whoever sent it, through any proxy
or log on the way, and the server logs a traceback for a client's mistake. Here the body names only what was wrong
(llhttp's reason, such as "Invalid header value char") and the log has one line at debug level.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web, web_protocol, web_server
from aiohttp.http_exceptions import HttpProcessingError

from common import listener

log = logging.getLogger(__name__)


class Handler(web_protocol.RequestHandler, listener.Handler):
    __slots__ = ()

    @property
    def idle(self) -> bool:
        """Whether the connection waits between requests (no request being answered): one a newcomer may take the
        place of. aiohttp keeps this as private state (3.10 and later); without it every connection counts as idle."""
        return not getattr(self, "_request_in_progress", False)

    @property
    def certified(self) -> bool:
        """Whether the client presented a certificate the TLS handshake verified (the aggregator's front proxy, a
        client of the web configuration's CA)."""
        ssl_object = self.transport.get_extra_info("ssl_object") if self.transport is not None else None
        return ssl_object is not None and ssl_object.getpeercert(binary_form=True) is not None

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError) or request.writer.output_size > 0:
            return super().handle_error(request, status, exc, message)
        # the parser's message is its reason, then a colon and the line or header quoted
        reason = exc.message.split(":", 1)[0].strip() or "malformed request"
        log.debug("refused a request from %s that could not be parsed: %s", request.remote, reason)
        text = f"{status} Bad Request: {reason}\n" if status == 400 else f"{status}: {reason}\n"
        response = web.Response(status=status, text=text)
        response.force_close()
        return response


def handler_for(server: web_server.Server) -> Handler:
    """What ``server()`` would make, as a ``Handler``."""
    # Server keeps the handler's arguments (keep-alive timeout, access log...) for exactly this call
    return Handler(server, loop=asyncio.get_running_loop(), **server._kwargs)
