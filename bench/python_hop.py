"""The least a Python HTTP hop in front of Prometheus can cost: an aiohttp server on the adapter's event loop whose
one handler posts the query posted to it to Prometheus over a keep-alive connection and returns the answer's bytes.
No routing beyond one path, no auth, no parsing. bench/adapter_bench.py starts it next to the adapter, so the
adapter's overhead over raw Prometheus can be split into this hop's and the adapter's own.

    python -m bench.python_hop PROMETHEUS_URL PORT
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp
from aiohttp import web

from adapter.serving import event_loop


async def serve(prometheus: str, port: int) -> None:
    async with aiohttp.ClientSession() as session:

        async def forward(request: web.Request) -> web.Response:
            query = {"query": str((await request.post())["query"])}
            async with session.post(f"{prometheus}/api/v1/query", data=query) as answer:
                body = await answer.read()
            return web.Response(body=body, content_type="application/json")

        app = web.Application()
        app.router.add_post("/query", forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()


if __name__ == "__main__":
    event_loop.run(serve(sys.argv[1], int(sys.argv[2])))
