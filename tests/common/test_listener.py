"""The bounded listener's own life: started and stopped, whenever a stop comes (common/listener.py). Its bounds on
connections are tested through both servers: tests/common/test_connections.py, tests/collector/."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings

from common.listener import BoundedListener, Handler


async def test_a_start_cancelled_at_any_point_leaves_no_socket_open() -> None:
    """asyncio's create_server yields to the loop once its sockets listen: a program stopped there (the demo stops
    replicas that are starting) must not lose a listening socket to the garbage collector."""
    for passes in range(8):
        listener = BoundedListener(Handler, "127.0.0.1", 0)
        starting = asyncio.create_task(listener.start())
        for _ in range(passes):
            await asyncio.sleep(0)
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        listener.close()
        del starting, listener  # a cancelled task's traceback holds what its frames held
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
