"""Distinct large answers at once: the adapter's resident memory with and without --prometheus-max-bytes-in-flight.

A stand-in Prometheus answers every query with the same vector of ``--series`` DCGM-like series (125,000: 30 MB),
for pods nobody asks about, chunked without a Content-Length as Prometheus sends any answer but a small one
(``--content-length`` sends one). The adapter runs as a process, a fresh one for each row, with the flags of that
row (``--flags``, repeatable; by default ``--prometheus-max-bytes-in-flight=0``, no bound, then the defaults) and a
60 s query deadline unless the row sets another. Six wildcard requests at once name six different pods, so each is
its own query and nothing is shared; each rule the request tries is another answer. VmRSS and VmHWM (the peak) are
read from ``/proc/<pid>/status`` before, once all six are answered, and 5 s later. ``--adapter-root`` runs another
checkout of the adapter (an earlier commit, for the figures before a change). Prints a Markdown table.

``--rounds N`` asks N such rounds back to back, each for six pods no earlier round named (so every answer is read
anew), and prints each round's peak instead: VmHWM, reset before the round through ``/proc/<pid>/clear_refs``.
One burst leaves the allocators' free memory behind; sustained load shows whether later rounds reuse it or add to it.

    python -m bench.answer_budget [--series 125000] [--content-length] [--adapter-root DIR] [--rounds 8] \
        [--flags="--prometheus-timeout=10s ..." ...] [--env=MALLOC_ARENA_MAX=2 ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import aiohttp

from bench.adapter_bench import machine, rss_mb
from bench.prometheus_answers import adapter, ready, vector
from harness.kube.api import FakeKubeAPIServer

ROOT = Path(__file__).resolve().parents[1]
CM = "/apis/custom.metrics.k8s.io/v1beta2"
REQUESTS = 6
CHUNK = 64 * 1024


class StandIn(BaseHTTPRequestHandler):
    """Prometheus's query and label endpoints over HTTP/1.1; queries get ``answer``, counted once sent whole."""

    protocol_version = "HTTP/1.1"
    answer = b""
    content_length = False
    sent = 0
    _lock = threading.Lock()
    labels = json.dumps({"status": "success", "data": ["__name__", "namespace", "pod"]}).encode()
    names = json.dumps({"status": "success", "data": ["DCGM_FI_DEV_GPU_UTIL"]}).encode()

    def _send(self, body: bytes, chunked: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header(*(("Transfer-Encoding", "chunked") if chunked else ("Content-Length", str(len(body)))))
        self.end_headers()
        if not chunked:
            self.wfile.write(body)
            return
        for at in range(0, len(body), CHUNK):
            piece = body[at : at + CHUNK]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")

    def _answer(self) -> None:
        with contextlib.suppress(ConnectionError):  # the adapter hangs up on answers it refuses
            self._send(self.answer, chunked=not self.content_length)
            with self._lock:
                StandIn.sent += 1

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/api/v1/query":
            self._answer()
        else:
            self._send(self.names if "/values" in path else self.labels, chunked=False)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._answer()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def stand_in() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def commit_of(root: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    return done.stdout.strip()


def paths(round_: int) -> list[str]:
    """The six requests of a round: each names a pod of its own, so nothing is shared within or across rounds."""
    slots = range(round_ * REQUESTS, (round_ + 1) * REQUESTS)
    return [f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=slot%3D{k}" for k in slots]


async def get_all(session: aiohttp.ClientSession, url: str, round_paths: list[str]) -> list[int]:
    async def get(path: str) -> int:
        async with session.get(f"{url}{path}", timeout=aiohttp.ClientTimeout(total=600)) as resp:
            await resp.read()
            return resp.status

    return list(await asyncio.gather(*map(get, round_paths)))


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM starts again from VmRSS


def statuses_of(statuses: list[int]) -> str:
    return ", ".join(f"{n}x{s}" for s, n in sorted({s: statuses.count(s) for s in statuses}.items()))


async def rounds(root: Path, prom: str, kubeconfig: Path, flags: list[str], env: list[str], count: int) -> str:
    """One row of ``--rounds``: the statuses, then the peak RSS of each round and the RSS after the last."""
    peaks: list[str] = []
    answered: list[int] = []
    with adapter(root, prom, kubeconfig, flags, env) as (url, pid):
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=REQUESTS + 2)) as session:
            await ready(session, url)
            before, _ = rss_mb(pid)
            started = time.perf_counter()
            for round_ in range(count):
                reset_peak(pid)
                answered += await get_all(session, url, paths(round_))
                peaks.append(f"{rss_mb(pid)[1]:.0f}")
            elapsed = time.perf_counter() - started
            after, _ = rss_mb(pid)
    return f"| {statuses_of(answered)} | {elapsed:.0f} | {before:.0f} | {' | '.join(peaks)} | {after:.0f} |"


async def run(root: Path, prom: str, kubeconfig: Path, flags: list[str], env: list[str]) -> str:
    with adapter(root, prom, kubeconfig, flags, env) as (url, pid):
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=REQUESTS + 2)) as session:
            await ready(session, url)
            before, _ = rss_mb(pid)
            sent = StandIn.sent
            started = time.perf_counter()
            statuses = await get_all(session, url, paths(0))
            elapsed = time.perf_counter() - started
            after, peak = rss_mb(pid)
            await asyncio.sleep(5)  # well past --metrics-cache-ttl: nothing needs the answers any more
            later, _ = rss_mb(pid)
    return (
        f"| {statuses_of(statuses)} | {StandIn.sent - sent} | {elapsed:.1f} | {before:.0f} | {peak:.0f} | {after:.0f} "
        f"| {later:.0f} |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--series", type=int, default=125_000)
    parser.add_argument("--content-length", action="store_true", help="answers with a Content-Length")
    parser.add_argument("--adapter-root", type=Path, default=ROOT)
    parser.add_argument("--flags", action="append", help="one row's adapter flags, as one string; repeatable")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for every row's adapter; repeatable")
    parser.add_argument("--rounds", type=int, default=0, help="rounds back to back, a peak for each (0: one burst)")
    args = parser.parse_args()
    rows = args.flags if args.flags is not None else ["--prometheus-max-bytes-in-flight=0", ""]
    StandIn.answer, StandIn.content_length = vector(args.series), args.content_length
    commit = commit_of(args.adapter_root)
    print(f"Machine: {machine()}\n")
    where = "this checkout" if args.adapter_root == ROOT else str(args.adapter_root)
    print(
        f"Adapter: {where} ({commit or 'not a git checkout'}); {REQUESTS} requests at once, each answered "
        f"by {args.series:,} series ({len(StandIn.answer) / 1e6:.1f} MB) "
        f"{'with a Content-Length' if args.content_length else 'chunked'}"
        f"{', environment ' + ' '.join(args.env) if args.env else ''}\n"
    )
    if args.rounds:
        heads = "".join(f" round {n + 1} |" for n in range(args.rounds))
        print(f"{args.rounds} rounds back to back; peak RSS of each round and RSS before and after, in MiB\n")
        print(f"| adapter flags | statuses | seconds | before |{heads} after |")
        print(f"|---|---|---:|---:|{'---:|' * args.rounds}---:|")
    else:
        print(
            "| adapter flags | statuses | answers sent whole | seconds | RSS before (MiB) | peak RSS (MiB) "
            "| RSS after (MiB) | RSS 5 s later (MiB) |\n|---|---|---:|---:|---:|---:|---:|---:|"
        )
    work = Path(tempfile.mkdtemp(prefix="answer-budget-bench-"))
    kube = FakeKubeAPIServer()
    kube.put("namespaces", "ml")
    for k in range(REQUESTS * max(args.rounds, 1)):
        kube.put("pods", f"trainer-{k}", {"app": "trainer", "slot": str(k)}, namespace="ml")
    await kube.start()
    try:
        with stand_in() as prom:
            for row in rows:
                config, flags = kube.kubeconfig(work / "kubeconfig"), shlex.split(row)
                if args.rounds:
                    result = await rounds(args.adapter_root, prom, config, flags, args.env, args.rounds)
                else:
                    result = await run(args.adapter_root, prom, config, flags, args.env)
                print(f"| {row or '(defaults)'} {result}", flush=True)
    finally:
        await kube.stop()


if __name__ == "__main__":
    asyncio.run(main())
