"""StreamIsActive load: how many queries reach Prometheus, and how many streams are taken, when one client opens
``--streams`` streams in one namespace, each with its own label selector (``distinct``) or all asking one question
(``same``).

Runs a real Prometheus scraping the test exporter's GPU series, the adapter as a subprocess (``python -m adapter``,
plain gRPC, ``--metrics-cache-ttl=0s`` so that every question asked is a query) on CPU 0, and the client on CPU 1;
counts the queries through a proxy in front of Prometheus over ``--seconds`` once the streams are open.

    python -m bench.keda_streams [--streams 1000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import grpc

from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from bench.adapter_bench import adapter_process, machine, ready
from harness.adapter.in_process import populate
from harness.kube.api import FakeKubeAPIServer
from harness.processes import free_port
from harness.stores.exporter import GPU, Exporter, exposition
from harness.stores.prometheus import run_prometheus
from harness.stores.proxy import PrometheusProxy

# serving's GPU memory: one series, 8192 MiB, as the KEDA tests read it
QUESTION = {"metricName": "gpu_memory_used", "metricType": "external", "targetValue": "1"}


async def first_answers(stub: Any, count: int, distinct: bool) -> tuple[list[Any], int]:
    """``count`` streams, opened at once; those whose first answer came, and how many were refused."""
    streams = []
    for n in range(count):
        metadata = {**QUESTION, "labelSelector": f"bench!=s{n}"} if distinct else QUESTION
        streams.append(
            stub.StreamIsActive(pb.ScaledObjectRef(name=f"s{n}", namespace="serving", scalerMetadata=metadata))
        )

    async def first(stream: Any) -> bool:
        try:
            return isinstance(await stream.read(), pb.IsActiveResponse)
        except grpc.aio.AioRpcError as e:
            if e.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            return False

    opened = await asyncio.gather(*map(first, streams))
    return [s for s, ok in zip(streams, opened, strict=True) if ok], opened.count(False)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    os.sched_setaffinity(0, {1})
    work = Path(tempfile.mkdtemp(prefix="keda-streams-"))
    print(f"Machine: {machine()}\n")
    kube = FakeKubeAPIServer()
    populate(kube)
    await kube.start()
    kubeconfig = kube.kubeconfig(work / "kubeconfig")
    print("| streams asked for | questions | open | refused | queries/s reaching Prometheus |")
    print("|---:|---|---:|---:|---:|")
    try:
        with Exporter(exposition()) as exporter, run_prometheus(work / "prom", [exporter.target]) as prom:
            await asyncio.to_thread(prom.wait_for, GPU)
            proxy = PrometheusProxy(prom.url)
            await proxy.start()
            for distinct in (True, False):
                address = f"127.0.0.1:{free_port()}"
                flags = ("--metrics-cache-ttl=0s", f"--keda-scaler-address={address}")
                with adapter_process(proxy.url, kubeconfig, *flags) as (url, _):
                    async with aiohttp.ClientSession() as session, grpc.aio.insecure_channel(address) as channel:
                        await ready(session, url)
                        stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
                        streams, refused = await first_answers(stub, args.streams, distinct)
                        before = proxy.count("/api/v1/query")
                        await asyncio.sleep(args.seconds)
                        rate = (proxy.count("/api/v1/query") - before) / args.seconds
                        kind = "distinct selectors" if distinct else "one question"
                        print(f"| {args.streams} | {kind} | {len(streams)} | {refused} | {rate:.0f} |")
                        for stream in streams:
                            stream.cancel()
            await proxy.close()
    finally:
        await kube.stop()


if __name__ == "__main__":
    asyncio.run(main())
