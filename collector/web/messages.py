"""A request as the collector's paths read it, and the answer they give: plain data, with no server behind them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus

TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # the target up to its query, as sent: the paths served have nothing to decode
    headers: Mapping[str, str]  # names in lower case; a field sent more than once, its values joined by ", "
    transport: asyncio.BaseTransport | None = None  # for the TLS session: the client's certificate

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)  # one value per name, as written; framing is the server's

    def add(self, extra: tuple[tuple[str, str], ...]) -> None:
        """``extra``'s headers, but for a name already set (in any case)."""
        have = {name.lower() for name in self.headers}
        for name, value in extra:
            if name.lower() not in have:
                self.headers[name] = value
                have.add(name.lower())


Answer = Callable[[Request], Awaitable[Response]]
Served = Callable[[Request, Response], None]  # what hears of each answer sent


def text(status: int, body: str, **headers: str) -> Response:
    return Response(status, body.encode(), {"Content-Type": TEXT, **headers})


def status_text(status: int) -> str:
    """``404: Not Found``, as aiohttp words its own errors."""
    return f"{status}: {reason(status)}"


def reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(seconds: float | None = None) -> str:
    """RFC 9110's IMF-fixdate, in English whatever the locale."""
    t = time.gmtime(seconds)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
    )
