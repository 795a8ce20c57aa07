"""What the log keeps of requests aiohttp cannot parse (adapter/serving/server_log.py)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from adapter.serving.server_log import SERVER_LOGGER, RequestErrors, install
from common.log_limit import LogLimit

TOKEN = "secret-token-5f1e"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def output() -> Iterator[io.StringIO]:
    """aiohttp's server logger writing to a string, as the adapter's logging writes to stderr."""
    logger = logging.getLogger(SERVER_LOGGER)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)
    logger.propagate = True
    for f in list(logger.filters):
        logger.removeFilter(f)


def bad_request(exc: Exception) -> None:
    """What aiohttp's RequestHandler.handle_error does with a request it could not parse."""
    try:
        raise exc
    except Exception as e:
        logging.getLogger(SERVER_LOGGER).exception("Error handling request from %s", "10.0.0.7", exc_info=e)


def test_one_line_without_the_bytes_the_client_sent(output: io.StringIO) -> None:
    install(tracebacks=False, limit=LogLimit(clock=Clock()))
    bad_request(BadHttpMessage(f"Invalid header value char:\n\n  b'Authorization: Bearer {TOKEN}\\x00'\n   ^"))
    assert output.getvalue() == "WARNING aiohttp.server: Error handling request from 10.0.0.7: 400 BadHttpMessage\n"


def test_when_debugging_the_stack_is_kept_but_not_the_message(output: io.StringIO) -> None:
    install(tracebacks=True, limit=LogLimit(clock=Clock()))
    bad_request(LineTooLong(f"Bearer {TOKEN * 800}", "8190"))
    text = output.getvalue()
    assert TOKEN not in text
    assert "Traceback (most recent call last):" in text
    assert "in bad_request" in text
    assert text.rstrip().endswith("aiohttp.http_exceptions.LineTooLong")


def test_one_line_per_kind_per_interval_then_how_many_were_held_back(output: io.StringIO) -> None:
    clock = Clock()
    install(tracebacks=False, limit=LogLimit(interval=60, clock=clock))
    for _ in range(300):
        bad_request(BadHttpMessage(TOKEN))
    bad_request(LineTooLong(TOKEN, "8190"))
    clock.now += 59
    bad_request(BadHttpMessage(TOKEN))
    clock.now += 1
    bad_request(BadHttpMessage(TOKEN))
    assert output.getvalue().splitlines() == [
        "WARNING aiohttp.server: Error handling request from 10.0.0.7: 400 BadHttpMessage",
        "WARNING aiohttp.server: Error handling request from 10.0.0.7: 400 LineTooLong",
        "WARNING aiohttp.server: Error handling request from 10.0.0.7: 400 BadHttpMessage "
        "(300 more like it in the last 60 s not logged)",
    ]


def test_the_adapters_own_failures_stay_errors(output: io.StringIO) -> None:
    install(tracebacks=False, limit=LogLimit(clock=Clock()))
    try:
        raise RuntimeError(TOKEN)
    except RuntimeError as e:
        logging.getLogger(SERVER_LOGGER).exception("Unhandled exception", exc_info=e)
    assert output.getvalue() == "ERROR aiohttp.server: Unhandled exception: RuntimeError\n"


def test_installing_again_replaces_the_filter() -> None:
    install(tracebacks=False)
    errors = install(tracebacks=True)
    logger = logging.getLogger(SERVER_LOGGER)
    try:
        assert [f for f in logger.filters if isinstance(f, RequestErrors)] == [errors]
    finally:
        logger.removeFilter(errors)
