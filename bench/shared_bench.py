"""/metrics latency with 8 simulated GPUs and 8 pods sharing each (64 pods, per-pod shares every cycle).

The collector runs in this process with its real pod mapping: the pod-resources API over a gRPC unix socket, cgroup
files in a temporary /proc, the 5 Hz process sampler. A separate process scrapes /metrics over one keep-alive
connection, so client and server do not share an interpreter. Prints a Markdown table.

    python -m bench.shared_bench [--gpus 8] [--pods-per-gpu 8] [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

from collector.cli import build_node
from collector.server import answer_for
from collector.settings import parse_settings
from collector.simulation.nvml import SimulatedNvml
from collector.web.server import HttpServer
from harness.node import proc_tree
from harness.node.kubelet import PodResourcesServer, gpu_pod
from harness.node.pod_directory import StaticPodDirectory
from harness.processes import free_port

CLIENT = """
import http.client, json, sys, time
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
lat = []
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter()
    conn.request("GET", "/metrics")
    body = conn.getresponse().read()
    lat.append((time.perf_counter() - t0) * 1000)
lat.sort()
print(json.dumps({"p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)], "bytes": len(body),
                  "pod_series": body.count(b'pod="')}))
"""


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods-per-gpu", type=int, default=8)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    share = 0.95 / args.pods_per_gpu
    processes = {g: {10_000 + g * 100 + p: share for p in range(args.pods_per_gpu)} for g in range(args.gpus)}
    nvml = SimulatedNvml(args.gpus, processes=processes)
    tree = proc_tree.ProcTree(tmp / "proc")
    directory = StaticPodDirectory()
    kubelet = PodResourcesServer(str(tmp / "kubelet.sock")).start()
    for g in range(args.gpus):
        uuid = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(g))
        for p in range(args.pods_per_gpu):
            pid, uid, name = 10_000 + g * 100 + p, f"00000000-0000-4000-8000-{g:06d}{p:06d}", f"worker-{g}-{p}"
            tree.add(pid, proc_tree.v2_systemd(uid))
            directory.pods[uid] = ("bench", name)
            kubelet.pods.append(gpu_pod("bench", name, f"{uuid}::{p}", resource="nvidia.com/gpu.shared"))
    port = free_port()
    settings = parse_settings(
        ["-k", "--pod-resources-kubelet-socket", kubelet.socket_path, "--proc-root", str(tree.root)], env={}
    )
    node = build_node(settings, nvml, True, directory=directory)
    assert node.watcher is not None  # -k
    node.start()
    refreshing = asyncio.create_task(node.watcher.run())  # on the event loop, as in the collector
    server = HttpServer(answer_for(node.collection), "127.0.0.1", port)
    await server.start()
    await asyncio.sleep(3)

    cpu0, wall0 = cpu_seconds(), time.monotonic()
    await asyncio.sleep(args.idle_seconds)  # collection, sampler and pod refresh only: no scrapes
    idle_cpu = (cpu_seconds() - cpu0) / (time.monotonic() - wall0)

    client = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENT, str(port), str(args.requests), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await client.communicate()
    result = json.loads(out)
    await server.stop()
    refreshing.cancel()
    node.stop()
    kubelet.stop()

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, ", end="")
    print(f"Python {platform.python_version()}")
    print(f"{args.gpus} simulated GPUs x {args.pods_per_gpu} sharing pods; {args.requests} sequential scrapes\n")
    print("| GPUs | pods | series with a pod label | /metrics p50 (ms) | /metrics p99 (ms) | body (bytes) ", end="")
    print("| collector CPU, no scrapes |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {args.gpus} | {args.gpus * args.pods_per_gpu} | {result['pod_series']} | {result['p50']:.2f} | "
        f"{result['p99']:.2f} | {result['bytes']} | {100 * idle_cpu:.2f} % of a core |"
    )


if __name__ == "__main__":
    asyncio.run(main())
