"""Collector connections benchmark: the collector's resident memory under connections that never finish a request.

Starts the collector (one simulated GPU; with ``--tls`` behind a web configuration file with a serving certificate)
as a process, a fresh one for each row, and opens ``--counts`` connections of each kind:

  heads   sends a request head of ``--head-kib`` KiB in 8 KiB lines, never the blank line that ends it
  idle    opens the TCP connection and sends nothing (with TLS: not even a ClientHello)
  kept    sends one whole request (``GET /health``), reads the answer and keeps the connection open, idle: past the
          connection limit (1,000) these are the strangers that renew their requests now and then
  unread  sends ``GET /metrics`` and reads nothing, with a 4 KiB receive buffer: the page waits in the collector's
          socket and write buffers

Its VmRSS (/proc/<pid>/status) and, for ``unread``, the bytes in its sockets' send queues (``/proc/net/tcp``: the
system's memory, which the pod's memory cgroup is charged for) are read before, once all are open (peak), and
``--settle`` seconds after they are closed; meanwhile a scrape on a new connection shows whether the collector still
serves Prometheus, and the connections are held ``--hold`` seconds to count those the collector closed by itself.
``--root`` runs another checkout's collector (an older one, for the figures before a change). The page of ``--gpus``
simulated GPUs: 8 give 66 KB, 48 give 364 KB. Prints a Markdown table.

    python -m bench.collector_connections [--counts 200,500] [--kinds heads,idle,kept,unread] [--tls] [--hold 40] \
        [--gpus 1] [--root DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.adapter_bench import machine
from bench.connections_bench import raise_open_files
from harness.node.web_config import tls_web_config
from harness.processes import free_port

ROOT = Path(__file__).resolve().parents[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def server_sockets(port: int) -> list[list[str]]:
    """The fields of ``/proc/net/tcp`` for the sockets on ``port``: the server's side of each connection."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] != "0A":  # not the listening one
                    out.append(fields)
    return out


def send_queues_mib(port: int) -> float:
    """The bytes waiting in the send queues of the server's side of the connections on ``port``, in MiB."""
    return sum(int(fields[4].split(":")[0], 16) for fields in server_sockets(port)) / 2**20


def client_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


async def scrape(port: int, tls: bool) -> str:
    """The status of one /metrics request on a new connection, or why there was none."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client_tls() if tls else None), 10
        )
    except (OSError, TimeoutError) as e:
        return f"no connection ({type(e).__name__})"
    try:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        line = await asyncio.wait_for(reader.readline(), 10)
        return line.decode().split(" ", 2)[1] if line else "closed"
    except (OSError, TimeoutError) as e:
        return f"no answer ({type(e).__name__})"
    finally:
        writer.close()


async def connected(port: int, small_window: bool) -> socket.socket:
    """A socket connected to the collector; ``small_window``: with a 4 KiB receive buffer, so that the system holds
    little of an answer the client does not read."""
    sock = socket.socket()
    if small_window:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return sock


@dataclass
class Row:
    kind: str
    count: int
    opened: int
    before: float
    peak: float
    queued: float
    after: float
    scrape: str
    closed_by_collector: int


async def attack(
    port: int, pid: int, kind: str, count: int, tls: bool, head_kib: int, hold: float, settle: float
) -> Row:
    before = rss_mib(pid)
    writers: list[asyncio.StreamWriter] = []
    readers: list[asyncio.StreamReader] = []
    line = b"X-Fill: " + b"a" * (8 * 1024 - 12) + b"\r\n"
    for _ in range(count):
        try:
            # TLS for the heads, whose bytes the collector reads; an idle TLS connection is a TCP one with no hello
            tls_here = tls and kind != "idle"
            reader, writer = await asyncio.open_connection(
                sock=await connected(port, small_window=kind == "unread"),
                ssl=client_tls() if tls_here else None,
                server_hostname="127.0.0.1" if tls_here else None,
            )
        except OSError:
            break
        if kind == "heads":
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + line * (head_kib // 8))
        elif kind == "unread":
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        elif kind == "kept":
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            # refused at the limit: counted below as closed by the collector
            with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError):
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        readers.append(reader)
        writers.append(writer)
    await asyncio.gather(*(w.drain() for w in writers), return_exceptions=True)
    await asyncio.sleep(2)
    peak, queued = rss_mib(pid), send_queues_mib(port)
    served = await scrape(port, tls)
    await asyncio.sleep(hold)
    if kind == "unread":  # these clients read nothing, so they cannot tell: the server's side of each is looked at
        established = sum(1 for fields in server_sockets(port) if fields[3] == "01")
        closed = len(writers) - min(established, len(writers))
    else:
        closed = sum(1 for r in readers if r.at_eof() or r.exception() is not None)
    for w in writers:
        w.close()
    await asyncio.sleep(settle)
    return Row(kind, count, len(writers), before, max(peak, rss_mib(pid)), queued, rss_mib(pid), served, closed)


def start(root: Path, port: int, tls_config: Path | None, gpus: int = 1) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "collector", "-a", f"127.0.0.1:{port}", "--simulate-gpus", str(gpus)]
    if tls_config is not None:
        args += ["--web-config-file", str(tls_config)]
    proc = subprocess.Popen(args, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 30
    while asyncio.run(scrape(port, tls_config is not None)) != "200":
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the collector did not start")
        time.sleep(0.3)
    time.sleep(3)  # a few collections: the resident set of a collector at work
    return proc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="200,500")
    parser.add_argument("--kinds", default="heads,idle")
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--head-kib", type=int, default=1024)
    parser.add_argument("--hold", type=float, default=40.0)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--gpus", type=int, default=1, help="simulated GPUs: the size of the page")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    raise_open_files(2 * max(counts) + 256)
    work = Path(tempfile.mkdtemp(prefix="collector-connections-"))
    config = tls_web_config(work) if args.tls else None
    print(f"Machine: {machine()}\n")
    print(
        f"Collector from {args.root.resolve()}, {'TLS' if args.tls else 'plain HTTP'}, heads of {args.head_kib} KiB\n"
    )
    print("| kind | connections | opened | RSS before (MiB) | peak (MiB) | send queues (MiB) | after (MiB) "
          f"| a scrape meanwhile | closed by the collector within {args.hold:g} s |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for kind in args.kinds.split(","):
        for count in counts:
            port = free_port()
            proc = start(args.root, port, config, args.gpus)
            try:
                row = asyncio.run(attack(port, proc.pid, kind, count, args.tls, args.head_kib, args.hold, args.settle))
            finally:
                proc.terminate()
                proc.wait(30)
            print(f"| {row.kind} | {row.count} | {row.opened} | {row.before:.0f} | {row.peak:.0f} | {row.queued:.0f} "
                  f"| {row.after:.0f} | {row.scrape} | {row.closed_by_collector} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
