"""Connections benchmark: the adapter's resident memory with many open TLS connections, and after they close.

Starts the adapter as deployed (TLS, delegated authentication against the fake Kubernetes API server, a real
Prometheus) as a process pinned to CPU 0, a fresh one for each row, and opens from CPU 1 ``--counts`` connections of
each kind:

  idle        the TLS handshake, then nothing
  keep-alive  one authenticated request (the HPA's token, discovery), then nothing: a client keeping its connection
  slowloris   a request line, then one header line every ``--slow-interval`` seconds, never the blank line

The adapter's VmRSS (/proc/<pid>/status) is read before, once all are open, and ``--settle`` seconds after the
benchmark closed them; meanwhile one request on a new connection shows whether the adapter still serves, and the
connections are held ``--hold`` seconds to see which the adapter closes by itself. Prints a Markdown table.

    python -m bench.connections_bench [--counts 500,1000,2000] [--kinds idle,keep-alive,slowloris] [--hold 40] \
        [--max-connections N] [--env MALLOC_ARENA_MAX=2] [--adapter-root ../an-older-checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import ssl
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench.adapter_bench import machine  # noqa: E402
from harness.adapter.process import AdapterProcess, secure_adapter  # noqa: E402
from harness.kube.api import FakeKubeAPIServer  # noqa: E402
from harness.kube.cluster import HPA_TOKEN  # noqa: E402
from harness.stores.prometheus import run_prometheus  # noqa: E402

DISCOVERY = "/apis/custom.metrics.k8s.io/v1beta2"
KINDS = ("idle", "keep-alive", "slowloris")


def raise_open_files(wanted: int) -> int:
    """Both ends of every connection are on this machine: the benchmark and the adapter (which inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard == resource.RLIM_INFINITY else min(max(soft, wanted), hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next((int(h.split(":", 1)[1]) for h in lines if h.lower().startswith("content-length:")), 0)
    await reader.readexactly(length)
    return int(lines[0].split()[1])


def request(path: str, token: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: adapter\r\nAuthorization: Bearer {token}\r\n\r\n".encode()


@dataclass
class Row:
    count: int
    kind: str
    opened: int = 0
    refused: int = 0
    rss_before: int = 0
    rss_open: int = 0
    rss_after: int = 0
    probe: str = ""
    open_seconds: float = 0.0
    closed_by_adapter: list[float] = field(default_factory=list)


class Connection:
    def __init__(self, adapter: AdapterProcess, kind: str, slow_interval: float) -> None:
        self.adapter = adapter
        self.kind = kind
        self.slow_interval = slow_interval
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.closed_after: float | None = None

    async def open(self, ctx: ssl.SSLContext) -> bool:
        try:
            reader, self.writer = await asyncio.open_connection(self.adapter.host, self.adapter.port, ssl=ctx)
            if self.kind == "keep-alive":
                self.writer.write(request(DISCOVERY, HPA_TOKEN))
                if await read_response(reader) != 200:
                    raise RuntimeError("the keep-alive client's request was not answered 200")
            elif self.kind == "slowloris":
                self.writer.write(b"GET /apis HTTP/1.1\r\nHost: adapter\r\n")
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            return False
        self.reader = reader
        return True

    async def hold(self) -> None:
        """Until the adapter closes the connection (noted) or the benchmark cancels this."""
        started = time.monotonic()
        assert self.reader is not None
        assert self.writer is not None
        line = 0
        while True:
            try:
                data = await asyncio.wait_for(self.reader.read(1), self.slow_interval)
            except TimeoutError:
                if self.kind == "slowloris":
                    line += 1
                    self.writer.write(f"X-Slow-{line}: {line}\r\n".encode())
                continue
            except (OSError, ssl.SSLError):
                data = b""
            if not data:
                self.closed_after = time.monotonic() - started
                return

    def close(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()


async def probe(adapter: AdapterProcess, ctx: ssl.SSLContext) -> str:
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(adapter.host, adapter.port, ssl=ctx), 30)
        writer.write(request(DISCOVERY, HPA_TOKEN))
        code = await asyncio.wait_for(read_response(reader), 30)
        writer.transport.abort()
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError, TimeoutError) as e:
        return f"failed ({type(e).__name__})"
    return f"{code} in {(time.perf_counter() - started) * 1000:.0f} ms"


async def measure(
    kube: FakeKubeAPIServer, prom_url: str, count: int, kind: str, args: argparse.Namespace, workdir: Path
) -> Row:
    row = Row(count, kind)
    limits = {"max_connections": args.max_connections} if args.max_connections else None
    async with secure_adapter(
        kube, prom_url, workdir, env=dict(args.env), cpus={0}, limits=limits, root=args.adapter_root
    ) as adapter:
        ctx = adapter.context()
        await asyncio.sleep(1)
        row.rss_before = adapter.rss_kib()
        connections = [Connection(adapter, kind, args.slow_interval) for _ in range(count)]
        gate = asyncio.Semaphore(64)

        async def open_one(c: Connection) -> bool:
            async with gate:
                return await c.open(ctx)

        started = time.monotonic()
        results = await asyncio.gather(*(open_one(c) for c in connections))
        row.open_seconds = time.monotonic() - started
        opened = [c for c, ok in zip(connections, results, strict=True) if ok]
        row.opened, row.refused = len(opened), count - len(opened)
        holders = [asyncio.create_task(c.hold()) for c in opened]
        await asyncio.sleep(2)
        row.rss_open = adapter.rss_kib()
        row.probe = await probe(adapter, ctx)
        await asyncio.sleep(max(0.0, args.hold - (time.monotonic() - started)))
        row.closed_by_adapter = [c.closed_after for c in opened if c.closed_after is not None]
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        for c in connections:
            c.close()
        await asyncio.sleep(args.settle)
        row.rss_after = adapter.rss_kib()
    return row


def mib(kib: int) -> str:
    return f"{kib / 1024:.0f}"


def table(rows: list[Row], hold: float) -> list[str]:
    out = [
        "| connections | kind | opened / refused | RSS before (MiB) | RSS open (MiB) | per connection (KiB) "
        f"| a new request while open | closed by the adapter within {hold:.0f} s | RSS after close (MiB) |",
        "|---:|---|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in rows:
        per = (r.rss_open - r.rss_before) / r.opened if r.opened else 0
        closed = len(r.closed_by_adapter)
        when = f" (median {statistics.median(r.closed_by_adapter):.0f} s)" if closed else ""
        out.append(
            f"| {r.count} | {r.kind} | {r.opened} / {r.refused} | {mib(r.rss_before)} | {mib(r.rss_open)} "
            f"| {per:.0f} | {r.probe} | {closed}{when} | {mib(r.rss_after)} |"
        )
    return out


async def main(args: argparse.Namespace) -> None:
    limit = raise_open_files(4 * max(args.counts) + 1024)
    kube = FakeKubeAPIServer()
    await kube.start()
    os.sched_setaffinity(0, {1} if (os.cpu_count() or 1) > 1 else {0})
    rows = []
    with tempfile.TemporaryDirectory(prefix="connections-bench-") as tmp, run_prometheus(Path(tmp) / "prom") as prom:
        for kind in args.kinds:
            for count in args.counts:
                workdir = Path(tmp) / f"{kind}-{count}"
                workdir.mkdir()
                rows.append(await measure(kube, prom.url, count, kind, args, workdir))
                print(table(rows, args.hold)[-1], file=sys.stderr, flush=True)
    await kube.stop()
    print(f"Machine: {machine()}; open files limit {limit}.")
    env = " ".join(f"{k}={v}" for k, v in args.env) or "none"
    cap = args.max_connections or "its default"
    print(f"Adapter: {args.adapter_root}; connection limit: {cap}; environment added: {env}.")
    print(f"Slowloris: one header line every {args.slow_interval:g} s.\n")
    print("\n".join(table(rows, args.hold)))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--counts", default="500,1000,2000", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--kinds", default=",".join(KINDS), type=lambda s: s.split(","))
    p.add_argument("--hold", default=40.0, type=float, help="seconds from the first connection to closing them all")
    p.add_argument("--settle", default=5.0, type=float, help="seconds after closing before RSS is read again")
    p.add_argument("--slow-interval", default=10.0, type=float)
    p.add_argument("--max-connections", type=int, help="the adapter's connection limit (default: its own)")
    p.add_argument("--adapter-root", type=Path, default=ROOT, help="the checkout whose adapter runs")
    p.add_argument(
        "--env", action="append", default=[], type=lambda s: tuple(s.split("=", 1)), help="KEY=VALUE for the adapter"
    )
    args = p.parse_args(argv)
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        p.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
