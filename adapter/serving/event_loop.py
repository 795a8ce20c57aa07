"""The event loop the programs run on: uvloop's (libuv) where it is installed, else asyncio's own.

A request through the adapter is mostly event-loop work: two socket reads, two writes, a handful of callbacks.
uvloop does that work in C: a minimal aiohttp hop in front of Prometheus used 540 µs of CPU per request on uvloop
against 800 on asyncio's loop (docs/adapter-bench.md). Both loops run the same code; uvloop has no wheel for some
platforms, where asyncio's is used and the start-up log says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the fastest loop available."""
    try:
        import uvloop
    except ImportError:
        log.info("uvloop is not installed: running on asyncio's event loop")
        return asyncio.run(main)
    return uvloop.run(main)
