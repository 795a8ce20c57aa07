"""aiohttp's servers on the bounded listener (``common/listener.py``): its limits, timeouts and refusals, with
aiohttp's connection handler (``common/request_handler.py``) answering each accepted connection.

The names of ``listener.py`` that servers need are here too, so that an aiohttp server imports one module.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

from aiohttp import web

from common.listener import (
    TRIM_AFTER_CLOSES,
    BoundedListener,
    Limits,
    ListenError,
    listen,
)
from common.log_limit import LogLimit
from common.request_handler import Handler, handler_for

__all__ = ["TRIM_AFTER_CLOSES", "BoundedSite", "Limits", "ListenError", "listen", "runner"]


def runner(app: web.Application, limits: Limits, access_log: logging.Logger | None) -> web.AppRunner:
    """aiohttp's runner for ``app``, whose keep-alive timer is the idle timeout."""
    return web.AppRunner(app, access_log=access_log, keepalive_timeout=limits.idle_timeout)


class BoundedSite(web.BaseSite):
    """aiohttp's ``TCPSite`` on a ``BoundedListener``. ``host`` None listens on every address, IPv4 and IPv6, as
    ``TCPSite`` does."""

    def __init__(
        self,
        app_runner: web.BaseRunner,
        host: str | None,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        limits: Limits | None = None,
        trim: Callable[[], None] | None = None,
        log_limit: LogLimit | None = None,
    ) -> None:
        super().__init__(app_runner, ssl_context=ssl_context)

        def handler() -> Handler:
            server = app_runner.server
            assert server is not None, "the runner is set up before a site starts"
            return handler_for(server)

        self.listener = BoundedListener(
            handler, host, port, ssl_context=ssl_context, limits=limits, trim=trim, log_limit=log_limit,
            backlog=self._backlog,
        )  # fmt: skip

    @property
    def name(self) -> str:
        return self.listener.name

    @property
    def open(self) -> int:
        return self.listener.open

    @property
    def limits(self) -> Limits:
        return self.listener.limits

    async def start(self) -> None:
        await super().start()
        await self.listener.start()
        self._server = self.listener.server

    async def stop(self) -> None:
        self.listener.close()
        await super().stop()
