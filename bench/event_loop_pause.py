"""Event-loop pauses while the adapter reads a large Prometheus answer: what the tests show only as health probes
answered meanwhile, as figures.

A recording proxy answers every query with ``--series`` DCGM series (about 240 bytes each; 60,000 are 14 MB). Two
measurements, each ``--rounds`` times, interleaved so that the machine's load falls on both alike:

1. the Prometheus client alone, parsing the answer on the event loop (``parse_in_thread_above`` 1 GiB) and in a
   worker thread (the default): the longest a 2 ms ticker waited;
2. the whole adapter answering an HPA's wildcard request: the request's time and the longest pause within it.

    python -m bench.event_loop_pause [--series 60000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from adapter.app import create_app
from adapter.backends.prometheus import PrometheusClient, PrometheusConfig, make_session
from adapter.self_metrics import AdapterMetrics
from bench.adapter_bench import machine
from harness.adapter.in_process import populate, settings_for
from harness.event_loop import Ticker
from harness.kube.api import FakeKubeAPIServer
from harness.stores.answers import vector
from harness.stores.proxy import PrometheusProxy

TRAINERS = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer"


async def client_pause(config: PrometheusConfig, series: int) -> float:
    client = PrometheusClient(make_session(config), config, AdapterMetrics())
    try:
        async with Ticker() as ticker:
            result = await client.query("up")
    finally:
        await client.session.close()
    assert len(result.samples) == series
    return ticker.longest


async def request_pause(client: TestClient, series: int) -> tuple[float, float]:  # type: ignore[type-arg]
    async with Ticker() as ticker:
        resp = await client.get(TRAINERS)
        assert resp.status == 200, await resp.text()
        await resp.read()
    return ticker.lasted, ticker.longest


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} (max {max(values) * 1000:.0f})"


async def main(series: int, rounds: int) -> None:
    print(f"Machine: {machine()}\n")
    proxy = PrometheusProxy("http://127.0.0.1:9")  # never reached: every query is answered by the proxy itself
    await proxy.start()
    proxy.respond = (200, vector(series))
    kube = FakeKubeAPIServer()
    populate(kube)
    await kube.start()
    try:
        on_loop = PrometheusConfig(url=proxy.url, parse_in_thread_above=1024**3)
        in_thread = PrometheusConfig(url=proxy.url)
        paused: dict[str, list[float]] = {"on the event loop": [], "in a worker thread": []}
        for _ in range(rounds):
            paused["on the event loop"].append(await client_pause(on_loop, series))
            paused["in a worker thread"].append(await client_pause(in_thread, series))
        size = len(vector(series)) / 1e6
        print(f"## The Prometheus client reading {series:,} series ({size:.1f} MB), {rounds} rounds\n")
        print("| parsed | longest event-loop pause, ms: median (max) |\n|---|---:|")
        for where, values in paused.items():
            print(f"| {where} | {ms(values)} |")
        settings = settings_for(proxy.url, kube.kubeconfig(Path(tempfile.mkdtemp()) / "kubeconfig"), cache_ttl=0.0)
        async with TestClient(TestServer(create_app(settings))) as client:
            await asyncio.sleep(1)  # the object cache synced, the first relist done
            timed = [await request_pause(client, series) for _ in range(rounds)]
        print(f"\n## The adapter answering an HPA's wildcard request over that answer, {rounds} rounds\n")
        print("| request, ms: median (max) | longest event-loop pause within it, ms: median (max) | pause ÷ request |")
        print("|---:|---:|---:|")
        ratio = max(p / t for t, p in timed)
        print(f"| {ms([t for t, _ in timed])} | {ms([p for _, p in timed])} | at most {ratio:.2f} |")
    finally:
        await kube.stop()
        await proxy.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.series, args.rounds))
