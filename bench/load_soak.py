"""Load and soak on loopback: the chain from demo/stack.py (simulated GPUs, real Prometheus, adapter, collector).

    python -m bench.load_soak load [--connections 1000 --seconds 60]   # needs wrk (apt install wrk)
    python -m bench.load_soak soak [--minutes 10]

``load``: wrk holds --connections concurrent keep-alive clients against the HPA's request for --seconds and reports
latency percentiles and every error (socket errors, timeouts, non-2xx). ``soak``: a steady mix of requests against
the adapter (every path form, every 0.05 s) and scrapes of the collector (every 1 s) for --minutes, sampling both
processes' resident memory every 10 s; growth is measured from the end of the first minute (after caches filled).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import aiohttp

from demo.node import simulated_setup
from demo.stack import CUSTOM, Stack

HPA_PATH = f"{CUSTOM}/namespaces/ml/pods/%2A/gpu_utilization?labelSelector=app%3Dtrainer"
MIX = [
    HPA_PATH,
    f"{CUSTOM}/namespaces/ml/pods/trainer-1/gpu_memory_used",
    f"{CUSTOM}/namespaces/ml/pods/%2A/gpu_tensor_active?labelSelector=app%20in%20%28trainer%2Cinfer%29",
    f"{CUSTOM}/nodes/demo-node/gpu_utilization",
    f"{CUSTOM}/namespaces/ml/metrics/gpu_utilization",
    "/apis/custom.metrics.k8s.io/v1beta1",
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/%2A/no_such_metric",
    "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/gpu_utilization",
]


def rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


async def ready(stack: Stack) -> None:
    deadline = time.monotonic() + 60
    while len(await stack.pod_metric("gpu_utilization", "app=trainer")) < 3:
        if time.monotonic() > deadline:
            raise RuntimeError("the chain never served the trainers")
        await asyncio.sleep(0.5)


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}"


async def load(connections: int, seconds: int) -> None:
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    workdir = Path(tempfile.mkdtemp(prefix="load-"))
    args, pods = simulated_setup(workdir)
    async with Stack(workdir, collector_args=args) as stack:
        stack.set_pods(pods)
        await ready(stack)
        adapter_pid = stack.processes["adapter"].pid
        before = rss_mb(adapter_pid)
        result = await asyncio.to_thread(
            subprocess.run,
            [wrk, "-t", "2", "-c", str(connections), "-d", f"{seconds}s", "--timeout", "10s", "--latency",
             f"{stack.adapter_url}{HPA_PATH}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        after = rss_mb(adapter_pid)
        still = await stack.pod_metric("gpu_utilization", "app=trainer")
    out = result.stdout
    print(f"machine: {machine()}\n")
    print(f"wrk: {connections} connections, 2 threads, {seconds} s, GET the HPA's wildcard pods request\n")
    print("```\n" + out.strip() + "\n```\n")
    errors = re.search(r"Socket errors: (.*)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    print(f"errors: socket {errors.group(1) if errors else 'none'}; non-2xx {non2xx.group(1) if non2xx else 0}")
    print(f"adapter RSS before/after: {before:.0f} / {after:.0f} MB; answers after the load: {sorted(still)}")


async def soak(minutes: float) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    args, pods = simulated_setup(workdir)
    samples: list[tuple[float, float, float]] = []
    statuses: dict[int, int] = {}
    latencies: list[float] = []
    async with Stack(workdir, collector_args=args) as stack:
        stack.set_pods(pods)
        await ready(stack)
        pids = {name: p.pid for name, p in stack.processes.items()}
        start = time.monotonic()
        next_sample = start
        async with aiohttp.ClientSession() as session:
            i = 0
            while (now := time.monotonic()) - start < minutes * 60:
                if now >= next_sample:
                    samples.append((now - start, rss_mb(pids["adapter"]), rss_mb(pids["collector"])))
                    next_sample += 10
                    async with session.get(f"{stack.collector_url}/metrics") as resp:
                        await resp.read()
                        statuses[resp.status] = statuses.get(resp.status, 0) + 1
                t0 = time.perf_counter()
                async with session.get(stack.adapter_url + MIX[i % len(MIX)]) as resp:
                    await resp.read()
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1
                latencies.append((time.perf_counter() - t0) * 1000)
                i += 1
                await asyncio.sleep(0.05)
    print(f"machine: {machine()}\n")
    p99 = sorted(latencies)[int(len(latencies) * 0.99)]
    print(
        f"{minutes:g} min, {len(latencies)} adapter requests (a mix of {len(MIX)} paths), statuses {statuses}; "
        f"adapter latency p50 {statistics.median(latencies):.1f} ms, p99 {p99:.1f} ms\n"
    )
    print("| t (s) | adapter RSS (MB) | collector RSS (MB) |")
    print("|---|---|---|")
    for t, a, c in samples:
        print(f"| {t:.0f} | {a:.1f} | {c:.1f} |")
    base = next(s for s in samples if s[0] >= 60) if minutes > 1 else samples[0]
    last = samples[-1]
    print(
        f"\ngrowth from t={base[0]:.0f} s to t={last[0]:.0f} s: adapter {100 * (last[1] / base[1] - 1):+.1f} %, "
        f"collector {100 * (last[2] / base[2] - 1):+.1f} % (target: under 10 %)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("load")
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--seconds", type=int, default=60)
    s = sub.add_parser("soak")
    s.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args()
    if args.command == "load":
        asyncio.run(load(args.connections, args.seconds))
    else:
        asyncio.run(soak(args.minutes))


if __name__ == "__main__":
    main()
