"""What the log says of requests that never reach the app: one line each at most, a few a minute, and never what the
client sent.

aiohttp's server logs every request it cannot parse at ERROR with a traceback, and the exception's message quotes the
offending bytes: a header line such as ``Authorization: Bearer <token>\\x00`` went into the log whole, once per
request, whatever the verbosity. ``RequestErrors`` sits on aiohttp's ``aiohttp.server`` logger and rewrites each
record to aiohttp's own words (which name the client's address) and the exception's class, lets one record of each
kind through per interval and counts the rest into the next line of that kind. The traceback is kept only when
debugging, and then without the exception's message.
"""

from __future__ import annotations

import logging
import traceback

from aiohttp.http_exceptions import HttpProcessingError

from common.log_limit import LogLimit, left_out

INTERVAL = 60.0
SERVER_LOGGER = "aiohttp.server"


def _stack(exc: BaseException) -> str:
    # the frames only: the exception's message is where aiohttp quotes the request's bytes
    frames = "".join(traceback.format_tb(exc.__traceback__))
    return f"Traceback (most recent call last):\n{frames}{type(exc).__module__}.{type(exc).__qualname__}"


def _describe(exc: BaseException) -> str:
    name = type(exc).__name__
    return f"{exc.code} {name}" if isinstance(exc, HttpProcessingError) else name


class RequestErrors(logging.Filter):
    """On aiohttp's server logger: one line per record, throttled per kind, no request bytes (see the module)."""

    def __init__(self, limit: LogLimit, tracebacks: bool = False) -> None:
        super().__init__()
        self.limit = limit
        self.tracebacks = tracebacks

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        held = self.limit.allow(f"{record.msg}|{type(exc).__name__ if exc else ''}")
        if held is None:
            return False
        # aiohttp's own words with the client's address as their only argument; the request's bytes are only ever
        # in the exception
        said = record.getMessage()
        record.msg = "%s%s%s"
        record.args = (said, f": {_describe(exc)}" if exc else "", left_out(held, self.limit.interval))
        if isinstance(exc, HttpProcessingError) and record.levelno > logging.WARNING:
            # the client's mistake, not the adapter's
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        record.exc_info = None
        record.exc_text = _stack(exc) if exc is not None and self.tracebacks else None
        record.stack_info = None
        return True


def install(tracebacks: bool, limit: LogLimit | None = None) -> RequestErrors:
    """Put ``RequestErrors`` on aiohttp's server logger, in place of one put there before."""
    logger = logging.getLogger(SERVER_LOGGER)
    for old in [f for f in logger.filters if isinstance(f, RequestErrors)]:
        logger.removeFilter(old)
    errors = RequestErrors(limit or LogLimit(INTERVAL), tracebacks)
    logger.addFilter(errors)
    return errors
