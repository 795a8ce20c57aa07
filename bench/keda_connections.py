"""KEDA scaler connections benchmark: the adapter's resident memory with many TCP connections to its gRPC port that
never send a ClientHello, and after they close.

Starts the adapter as deployed (TLS, delegated authentication against the fake Kubernetes API server, a real
Prometheus, KEDA's scaler with a client CA) as a process pinned to CPU 0, a fresh one for each count, and opens from
CPU 1 ``--counts`` plain TCP connections to the scaler's port. The adapter's VmRSS is read before, 2 s after all are
open, and ``--settle`` seconds after the benchmark closed them; meanwhile one IsActive call with KEDA's client
certificate, on a new connection, shows whether KEDA is still served, and the connections are held ``--hold`` seconds
to see which the adapter closes by itself. Prints a Markdown table.

    python -m bench.keda_connections [--counts 1000,10000] [--hold 40] [--adapter-root ../an-older-checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import trustme

ROOT = Path(__file__).resolve().parents[1]

from adapter.keda.externalscaler import externalscaler_pb2 as pb  # noqa: E402
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc  # noqa: E402
from bench.adapter_bench import machine  # noqa: E402
from bench.connections_bench import mib, raise_open_files  # noqa: E402
from harness.adapter.process import AdapterProcess, secure_adapter  # noqa: E402
from harness.kube.api import FakeKubeAPIServer  # noqa: E402
from harness.processes import free_port  # noqa: E402
from harness.stores.prometheus import run_prometheus  # noqa: E402

QUESTION = pb.ScaledObjectRef(
    name="bench", namespace="ml", scalerMetadata={"metricName": "gpu_utilization", "targetValue": "60"}
)


@dataclass
class Row:
    count: int
    opened: int = 0
    rss_before: int = 0
    rss_open: int = 0
    rss_after: int = 0
    probe: str = ""
    closed_by_adapter: list[float] = field(default_factory=list)


async def probe(port: int, credentials: grpc.ChannelCredentials) -> str:
    """One IsActive call as KEDA makes it: served (whatever the answer) or refused before it was made."""
    started = time.perf_counter()
    options = [("grpc.ssl_target_name_override", "localhost")]
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials, options=options) as channel:
        stub: Any = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        try:
            await stub.IsActive(QUESTION, timeout=30)
        except grpc.aio.AioRpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return f"refused ({e.code().name})"
    return f"served in {(time.perf_counter() - started) * 1000:.0f} ms"


async def hold(reader: asyncio.StreamReader, started: float) -> float | None:
    """Seconds until the adapter closed the connection; cancelled by the benchmark otherwise."""
    try:
        while await reader.read(4096):
            pass
    except OSError:
        pass
    return time.monotonic() - started


async def measure(kube: FakeKubeAPIServer, prom_url: str, count: int, args: argparse.Namespace, work: Path) -> Row:
    row = Row(count)
    clients = trustme.CA()
    (work / "keda-ca.crt").write_bytes(clients.cert_pem.bytes())
    keda = clients.issue_cert("keda-operator")
    port = free_port()
    flags = (f"--keda-scaler-address=127.0.0.1:{port}", f"--keda-client-ca-file={work / 'keda-ca.crt'}")
    adapter: AdapterProcess
    async with secure_adapter(kube, prom_url, work, *flags, cpus={0}, root=args.adapter_root) as adapter:
        credentials = grpc.ssl_channel_credentials(
            adapter.cert.read_bytes(), keda.private_key_pem.bytes(), keda.cert_chain_pems[0].bytes()
        )
        await asyncio.sleep(1)
        row.rss_before = adapter.rss_kib()
        started = time.monotonic()
        writers: list[asyncio.StreamWriter] = []
        holders: list[asyncio.Task[float | None]] = []
        for _ in range(count):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            writers.append(writer)
            holders.append(asyncio.create_task(hold(reader, started)))
        row.opened = len(writers)
        await asyncio.sleep(2)
        row.rss_open = adapter.rss_kib()
        row.probe = await probe(port, credentials)
        await asyncio.sleep(max(0.0, args.hold - (time.monotonic() - started)))
        row.closed_by_adapter = [t.result() for t in holders if t.done() and t.result() is not None]  # type: ignore[misc]
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        for writer in writers:
            writer.transport.abort()
        await asyncio.sleep(args.settle)
        row.rss_after = adapter.rss_kib()
    return row


def table(rows: list[Row], hold: float) -> list[str]:
    out = [
        "| connections | opened | RSS before (MiB) | RSS open (MiB) | KEDA's call while open "
        f"| closed by the adapter within {hold:.0f} s | RSS after close (MiB) |",
        "|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in rows:
        closed = len(r.closed_by_adapter)
        when = ""
        if closed:
            times = sorted(r.closed_by_adapter)
            when = f" ({times[0]:.1f} to {times[-1]:.1f} s, median {statistics.median(times):.1f})"
        out.append(
            f"| {r.count} | {r.opened} | {mib(r.rss_before)} | {mib(r.rss_open)} | {r.probe} | {closed}{when} "
            f"| {mib(r.rss_after)} |"
        )
    return out


async def main(args: argparse.Namespace) -> None:
    limit = raise_open_files(4 * max(args.counts) + 1024)
    kube = FakeKubeAPIServer()
    await kube.start()
    os.sched_setaffinity(0, {1} if (os.cpu_count() or 1) > 1 else {0})
    rows = []
    with tempfile.TemporaryDirectory(prefix="keda-connections-") as tmp, run_prometheus(Path(tmp) / "prom") as prom:
        for count in args.counts:
            work = Path(tmp) / str(count)
            work.mkdir()
            rows.append(await measure(kube, prom.url, count, args, work))
            print(table(rows, args.hold)[-1], file=sys.stderr, flush=True)
    await kube.stop()
    print(f"Machine: {machine()}; open files limit {limit}. Adapter: {args.adapter_root}.\n")
    print("\n".join(table(rows, args.hold)))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--counts", default="1000,10000", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--hold", default=40.0, type=float, help="seconds from the first connection to closing them all")
    p.add_argument("--settle", default=5.0, type=float, help="seconds after closing before RSS is read again")
    p.add_argument("--adapter-root", type=Path, default=ROOT, help="the checkout whose adapter runs")
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
