"""KEDA external scaler benchmark: GetMetrics over gRPC against the HTTP GET that asks the same question, cached
and uncached, and the time from a queue appearing to StreamIsActive reporting it.

Runs a real Prometheus (scrape interval 1s) scraping the test exporter's GPU series plus one series the bench moves,
the Kubernetes API stand-in with the tests' pods, and two adapters as subprocesses (``python -m adapter``, plain gRPC
and HTTP) on CPU 0, the load on CPU 1: one with the default ``--metrics-cache-ttl`` (250ms; a repeated identical
request is answered from the value cache) and one with ``--metrics-cache-ttl=0s`` (every request queries
Prometheus). Each question is asked ``--requests`` times in turn over both protocols, one request at a time, on one
kept-alive connection each. Prints Markdown tables.

    python -m bench.keda_scaler [--requests 300] [--activations 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import grpc

from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.metadata import parse_metadata
from bench.adapter_bench import adapter_process, get_json, interleaved, machine, ms, percentile, ready
from harness.adapter.in_process import populate
from harness.kube.api import FakeKubeAPIServer
from harness.kube.wire import parse_quantity
from harness.processes import free_port
from harness.stores.exporter import GPU, LINES, Exporter, exposition
from harness.stores.prometheus import Prometheus, run_prometheus

# each question asked both ways (harness/stores/exporter.py): the namespace serving's GPU memory as an external
# metric (8192), and the sum over ml's trainers' pods of their GPU utilization (trainer-0 at 88, trainer-1 at 40)
QUESTIONS = {
    "external `gpu_memory_used`, namespace serving": (
        "serving",
        {"metricName": "gpu_memory_used", "metricType": "external", "targetValue": "1"},
    ),
    "pods `gpu_utilization`, namespace ml, `app=trainer`": (
        "ml",
        {"metricName": "gpu_utilization", "labelSelector": "app=trainer", "targetValue": "60"},
    ),
}
# the queue: one GPU in a namespace of its own, 0 until the bench raises it; activationValue 0, so any value wakes
QUEUE_NAMESPACE = "queue"
QUEUE = {"metricName": "gpu_utilization", "metricType": "external", "targetValue": "50", "activationValue": "0"}
QUEUE_LABELS = {"gpu": "0", "UUID": "GPU-q0", "Hostname": "node-q", "pod": "engine-q", "namespace": QUEUE_NAMESPACE}
ANSWER_WITHIN = 15.0  # far beyond a scrape plus a stream interval: a stream that says nothing is a failure
DEFAULT_CACHE_TTL = 0.25  # --metrics-cache-ttl's default (adapter/flags.py)
DEFAULT_STREAM_INTERVAL = 1.0  # --keda-stream-interval's default (adapter/keda/flags.py)
SCRAPE_INTERVAL = 1.0  # run_prometheus's


class Queue:
    """The exporter's page: the test series, and the queue's GPU at ``value``, read at every scrape."""

    def __init__(self) -> None:
        self.value = "0"

    def text(self) -> str:
        return exposition([*LINES, (GPU, QUEUE_LABELS, self.value)])


def ref(metadata: dict[str, str], namespace: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="scaled", namespace=namespace, scalerMetadata=metadata)


@contextlib.asynccontextmanager
async def scaler(address: str) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(address) as channel:
        yield pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]


async def get_metrics(stub: Any, scaled: pb.ScaledObjectRef) -> Decimal:
    name = scaled.scalerMetadata["metricName"]
    answer = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=scaled, metricName=name))
    [value] = answer.metricValues
    return Decimal(repr(value.metricValueFloat))


async def http_sum(session: aiohttp.ClientSession, url: str) -> Decimal:
    items = (await get_json(session, url))["items"]
    if not items:
        raise RuntimeError(f"{url}: no items")
    return sum((parse_quantity(item["value"]) for item in items), Decimal(0))


async def latency_rows(
    session: aiohttp.ClientSession, adapters: dict[str, tuple[str, Any]], requests: int
) -> list[str]:
    rows = [
        "| question | value cache | HTTP GET p50 / p99 (ms) | gRPC GetMetrics p50 / p99 (ms) "
        "| gRPC ÷ HTTP at p50 | gRPC ÷ HTTP at p99 |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for question, (namespace, metadata) in QUESTIONS.items():
        scaled = ref(metadata, namespace)
        path = parse_metadata(metadata).path(namespace)
        for cache, (base, stub) in adapters.items():
            url = f"{base}{path}"
            # the same question: both answers are the same number before either is timed
            over_http, over_grpc = await http_sum(session, url), await get_metrics(stub, scaled)
            if over_http != over_grpc:
                raise RuntimeError(f"{path}: HTTP answers {over_http}, GetMetrics {over_grpc}")

            async def via_http(u: str = url) -> Any:
                async with session.get(u) as resp:
                    if resp.status != 200:
                        raise RuntimeError(f"{u}: {resp.status}")
                    return await resp.read()

            async def via_grpc(s: Any = stub, r: pb.ScaledObjectRef = scaled) -> Any:
                return await get_metrics(s, r)

            # interleaved, so drift in the shared machine's load hits both alike
            http_t, grpc_t = await interleaved(requests, via_http, via_grpc)
            rows.append(
                f"| {question} | {cache} | {ms(percentile(http_t, 50))} / {ms(percentile(http_t, 99))} "
                f"| {ms(percentile(grpc_t, 50))} / {ms(percentile(grpc_t, 99))} "
                f"| {percentile(grpc_t, 50) / percentile(http_t, 50):.2f}x "
                f"| {percentile(grpc_t, 99) / percentile(http_t, 99):.2f}x |"
            )
    return rows


async def next_activity(stream: Any) -> bool:
    async with asyncio.timeout(ANSWER_WITHIN):
        answer = await stream.read()
    if not isinstance(answer, pb.IsActiveResponse):
        raise RuntimeError("the stream ended")
    return bool(answer.result)


async def activations(stub: Any, queue: Queue, prom: Prometheus, times: int) -> list[float]:
    """Seconds from the queue's value leaving 0 at the exporter to the stream's ``true``, ``times`` times."""
    queue.value = "0"
    await wait_scraped(prom, "0")
    stream = stub.StreamIsActive(ref(QUEUE, QUEUE_NAMESPACE))
    if await next_activity(stream):
        raise RuntimeError("the queue is active at 0")
    took: list[float] = []
    for i in range(times):
        # the scrape and the stream's looks tick on their own clocks: a different offset each round samples
        # where in them the queue appears, rather than one phase repeated
        await asyncio.sleep((i * 0.37) % 1.0)
        queue.value = "5"
        appeared = time.perf_counter()
        if not await next_activity(stream):
            raise RuntimeError("the stream sent false for a queue of 5")
        took.append(time.perf_counter() - appeared)
        queue.value = "0"
        if await next_activity(stream):
            raise RuntimeError("the stream sent true for an empty queue")
    stream.cancel()
    return took


async def wait_scraped(prom: Prometheus, value: str) -> None:
    query = f'{GPU}{{namespace="{QUEUE_NAMESPACE}"}}'
    deadline = time.monotonic() + 30
    while not any(r["value"][1] == value for r in await asyncio.to_thread(prom.query, query)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the queue at {value} never scraped")
        await asyncio.sleep(0.2)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--activations", type=int, default=5)
    args = parser.parse_args()
    os.sched_setaffinity(0, {1})
    work = Path(tempfile.mkdtemp(prefix="keda-bench-"))
    print(f"Machine: {machine()}\n")

    kube = FakeKubeAPIServer()
    populate(kube)
    kube.put("namespaces", QUEUE_NAMESPACE)
    await kube.start()
    kubeconfig = kube.kubeconfig(work / "kubeconfig")
    queue = Queue()
    cached_grpc, uncached_grpc = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    try:
        with (
            Exporter(queue.text) as exporter,
            run_prometheus(work / "prom", [exporter.target]) as prom,
            adapter_process(prom.url, kubeconfig, f"--keda-scaler-address={cached_grpc}") as (cached, _),
            adapter_process(
                prom.url, kubeconfig, "--metrics-cache-ttl=0s", f"--keda-scaler-address={uncached_grpc}"
            ) as (uncached, _),
        ):
            await asyncio.to_thread(prom.wait_for, GPU)
            async with (
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session,
                scaler(cached_grpc) as cached_stub,
                scaler(uncached_grpc) as uncached_stub,
            ):
                await ready(session, cached)
                await ready(session, uncached)
                adapters: dict[str, tuple[str, Any]] = {
                    "cached (default 250ms)": (cached, cached_stub),
                    "uncached (0s)": (uncached, uncached_stub),
                }
                print(f"## GetMetrics against the HTTP GET for the same question, {args.requests} sequential each\n")
                print("\n".join(await latency_rows(session, adapters, args.requests)))
                took = await activations(cached_stub, queue, prom, args.activations)
        bound = SCRAPE_INTERVAL + DEFAULT_STREAM_INTERVAL + DEFAULT_CACHE_TTL
        print(f"\n## A queue appearing to StreamIsActive's true, {args.activations} times\n")
        print("| scrape interval | --keda-stream-interval | --metrics-cache-ttl | median (s) | max (s) | bound (s) |")
        print("|---:|---:|---:|---:|---:|---:|")
        print(
            f"| {SCRAPE_INTERVAL:g}s | {DEFAULT_STREAM_INTERVAL:g}s | {DEFAULT_CACHE_TTL * 1000:g}ms "
            f"| {statistics.median(took):.2f} | {max(took):.2f} | {bound:.2f} |"
        )
        print(f"\nEach (s): {', '.join(f'{t:.2f}' for t in took)}")
    finally:
        await kube.stop()


if __name__ == "__main__":
    asyncio.run(main())
