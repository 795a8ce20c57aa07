"""The adapter's event loop answering HTTP while a worker thread reads a large /api/v1/series answer, at Python's
default GIL switch interval (5 ms) and at the adapter's (0.5 ms, adapter/cli.py), alternately.

A relist's series listings are megabytes each and are read in worker threads. The loop gives up the GIL at every
socket call and must then wait for the reader to hand it back: up to one switch interval each time. The server runs
on CPU 0, the client (sequential requests over one connection) on CPU 1.

    taskset -c 0 python -m bench.gil_convoy [--requests 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]

from adapter.backends.prometheus_answer import series_reply  # noqa: E402
from adapter.cli import SWITCH_INTERVAL  # noqa: E402

# what one metric's listing looks like at 16,000 GPUs: the collector's labels on each series
BODY = json.dumps(
    {
        "status": "success",
        "data": [
            {
                "__name__": "DCGM_FI_DEV_GPU_UTIL",
                "gpu": str(i % 8),
                "UUID": f"GPU-{i:08d}-0000-0000-0000-000000000000",
                "Hostname": f"node-{i // 8:04d}",
                "pod": f"gpu-{i:05d}",
                "namespace": f"team-{i % 100:03d}",
                "container": "main",
                "job": "gpuscale-collector",
                "instance": f"node-{i // 8:04d}",
            }
            for i in range(16_000)
        ],
    }
).encode()

CLIENT = """
import os, sys, time, urllib.request
os.sched_setaffinity(0, {1})
times = []
for _ in range(int(sys.argv[2])):
    began = time.perf_counter()
    urllib.request.urlopen(sys.argv[1]).read()
    times.append(time.perf_counter() - began)
times.sort()
print(sum(times), times[len(times) // 2], times[int(len(times) * 0.99)], times[-1])
"""


async def one(interval: float, requests: int) -> str:
    sys.setswitchinterval(interval)

    async def answer(request: web.Request) -> web.Response:
        await asyncio.sleep(0)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    stop, read = threading.Event(), [0]

    def reader() -> None:
        while not stop.is_set():
            series_reply(BODY)
            read[0] += 1

    thread = threading.Thread(target=reader)
    thread.start()
    client = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENT, f"http://127.0.0.1:{port}/", str(requests), stdout=subprocess.PIPE
    )
    out = (await client.communicate())[0].decode()
    stop.set()
    thread.join()
    await runner.cleanup()
    total, p50, p99, worst = map(float, out.split())
    return f"| {interval * 1000:g} ms | {_ms(p50)} | {_ms(p99)} | {_ms(worst)} | {read[0] / total:.1f} |"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"one listing: {len(BODY) / 1e6:.1f} MB, 16,000 series; server on CPUs {sorted(os.sched_getaffinity(0))}")
    print("\n| switch interval | p50 (ms) | p99 (ms) | max (ms) | listings read per second |")
    print("|---|---:|---:|---:|---:|")
    for _ in range(args.rounds):
        for interval in (0.005, SWITCH_INTERVAL):
            print(asyncio.run(one(interval, args.requests)), flush=True)


if __name__ == "__main__":
    main()
