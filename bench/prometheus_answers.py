"""Large Prometheus answers: the adapter's resident memory and how long its health probe waits meanwhile.

A stand-in Prometheus answers every query with the same canned vector of DCGM-like series for pods nobody asks
about (the case of a rule whose query does not narrow by pod, or of a proxy gone wrong). The adapter runs as a
subprocess with its default flags plus those given; six requests name six different pods, so each is its own query,
and each is answered with the large vector. Then, in a fresh adapter, one very large answer. Throughout, ``/healthz`` is
asked every 20 ms and its slowest answer is reported. Resident memory is read from ``/proc/<pid>/status``.

    python -m bench.prometheus_answers [--series 200000] [--huge-series 1000000] \
        [--adapter-root DIR] [--env NAME=VALUE ...] [--] [adapter flags...]

``--adapter-root`` runs another checkout of the adapter (an earlier commit, for before/after figures); ``--env`` sets
variables for it (glibc's ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_ARENA_MAX``, ...). The adapter runs through a wrapper
that calls glibc's ``malloc_trim(0)`` on SIGUSR1, so the table shows what returning freed heap to the system gains.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]

from bench.adapter_bench import machine, rss_mb  # noqa: E402
from harness.kube.api import FakeKubeAPIServer  # noqa: E402
from harness.processes import free_port  # noqa: E402

CM = "/apis/custom.metrics.k8s.io/v1beta2"
PODS = 6
# runs the adapter's module with a SIGUSR1 handler that returns glibc's free heap to the system
TRIM_WRAPPER = """
import ctypes, runpy, signal, sys
libc = ctypes.CDLL("libc.so.6")
signal.signal(signal.SIGUSR1, lambda *_: libc.malloc_trim(0))
sys.argv[0] = "adapter"
runpy.run_module("adapter", run_name="__main__", alter_sys=True)
"""


def vector(series: int) -> bytes:
    """About 240 bytes of JSON a series, as a DCGM gauge with its usual labels: none of them for a requested pod."""
    labels = (
        '{{"__name__":"DCGM_FI_DEV_GPU_UTIL","Hostname":"node-{n:06d}","UUID":"GPU-{i:08x}-0f3c-4b5e-9d2a-7c1e",'
        '"container":"main","gpu":"{g}","modelName":"NVIDIA H200","namespace":"ml","pod":"other-{i:07d}"}}'
    )
    items = (
        f'{{"metric":{labels.format(n=i // 8, i=i, g=i % 8)},"value":[1800000000.123,"{i % 100}"]}}'
        for i in range(series)
    )
    return b'{"status":"success","data":{"resultType":"vector","result":[' + ",".join(items).encode() + b"]}}"


class StandIn(BaseHTTPRequestHandler):
    """Prometheus's query and label endpoints; queries get ``answer``, the label lists name the GPU gauge."""

    answer = b""
    labels = json.dumps({"status": "success", "data": ["__name__", "namespace", "pod"]}).encode()
    names = json.dumps({"status": "success", "data": ["DCGM_FI_DEV_GPU_UTIL"]}).encode()

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(ConnectionError):  # the adapter hangs up on answers over its limit
            self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        self._send(self.answer if path == "/api/v1/query" else self.names if "/values" in path else self.labels)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._send(self.answer)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def stand_in() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@contextmanager
def adapter(root: Path, prom: str, kubeconfig: Path, extra: list[str], env: list[str]) -> Iterator[tuple[str, int]]:
    port = free_port()
    variables = dict(os.environ, PYTHONPATH=str(root), **dict(e.split("=", 1) for e in env))
    log = tempfile.NamedTemporaryFile(prefix="answers-bench-", suffix=".log", delete=False)  # noqa: SIM115
    args = [f"--prometheus-url={prom}", f"--lister-kubeconfig={kubeconfig}", "--insecure-serve-http"]
    args += ["--insecure-disable-auth", "--bind-address=127.0.0.1", f"--secure-port={port}", "--prometheus-timeout=60s"]
    proc = subprocess.Popen([sys.executable, "-c", TRIM_WRAPPER, *args, *extra], cwd=root, env=variables, stderr=log)
    try:
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def ready(session: aiohttp.ClientSession, url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            async with session.get(f"{url}/readyz") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("the adapter did not become ready")


async def while_probing(session: aiohttp.ClientSession, url: str, paths: list[str]) -> tuple[list[int], float, float]:
    """GET each path in turn while /healthz is asked every 20 ms: the statuses, the seconds taken, the slowest probe."""
    slowest = 0.0
    done = False

    async def probe() -> None:
        nonlocal slowest
        while not done:
            started = time.perf_counter()
            async with session.get(f"{url}/healthz") as resp:
                await resp.read()
            slowest = max(slowest, time.perf_counter() - started)
            await asyncio.sleep(0.02)

    prober = asyncio.create_task(probe())
    started = time.perf_counter()
    statuses = []
    for path in paths:
        async with session.get(f"{url}{path}") as resp:
            await resp.read()
            statuses.append(resp.status)
    elapsed = time.perf_counter() - started
    done = True
    await prober
    return statuses, elapsed, slowest


async def run(root: Path, prom: str, kubeconfig: Path, args: argparse.Namespace, huge: bool) -> str:
    paths = [f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=slot%3D{k}" for k in range(PODS)]
    with adapter(root, prom, kubeconfig, args.flags, args.env) as (url, pid):
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4)) as session:
            await ready(session, url)
            before, _ = rss_mb(pid)
            statuses, elapsed, slowest = await while_probing(session, url, paths[:1] if huge else paths)
            after, peak = rss_mb(pid)
            await asyncio.sleep(5)  # well past --metrics-cache-ttl: nothing needs the answers any more
            idle, _ = rss_mb(pid)
            os.kill(pid, signal.SIGUSR1)
            await asyncio.sleep(1)
            trimmed, _ = rss_mb(pid)
    answered = ", ".join(f"{n}x{s}" for s, n in sorted({s: statuses.count(s) for s in statuses}.items()))
    return (
        f"| {answered} | {elapsed:.1f} | {slowest * 1000:.0f} | {before:.0f} | {after:.0f} | {peak:.0f} "
        f"| {idle:.0f} | {trimmed:.0f} |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=200_000)
    parser.add_argument("--huge-series", type=int, default=1_000_000)
    parser.add_argument("--adapter-root", type=Path, default=ROOT)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the adapter's environment")
    parser.add_argument("flags", nargs="*", help="more adapter flags (after --)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="answers-bench-"))
    print(f"Machine: {machine()}\n")
    kube = FakeKubeAPIServer()
    kube.put("namespaces", "ml")
    for k in range(PODS):
        kube.put("pods", f"trainer-{k}", {"app": "trainer", "slot": str(k)}, namespace="ml")
    await kube.start()
    kubeconfig = kube.kubeconfig(work / "kubeconfig")
    header = (
        "| answers | answer bytes | statuses | seconds | slowest /healthz (ms) | RSS before (MB) | RSS after (MB) "
        "| peak RSS (MB) | RSS 5 s later (MB) | after malloc_trim (MB) |\n"
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    print(f"Adapter: {args.adapter_root}, flags {' '.join(args.flags) or '(defaults)'}, "
          f"environment {' '.join(args.env) or '(as is)'}\n\n{header}")  # fmt: skip
    try:
        with stand_in() as prom:
            for series, huge in ((args.series, False), (args.huge_series, True)):
                if not series:
                    continue
                StandIn.answer = vector(series)
                row = await run(args.adapter_root, prom, kubeconfig, args, huge)
                what = f"1 x {series:,} series" if huge else f"{PODS} x {series:,} series"
                print(f"| {what} | {len(StandIn.answer) / 1e6:.0f} MB {row}", flush=True)
    finally:
        await kube.stop()


if __name__ == "__main__":
    asyncio.run(main())
