"""Two processes share one real GPU at different loads: what NVML says per process, and the per-pod values the
collector makes of it. Runs the collector's real pod mapping (pod-resources over gRPC, /proc cgroups, the process
sampler) against real NVML; only the kubelet and the pod directory are stand-ins, as no Kubernetes runs there.

    PYTHONPATH=. python bench/h200_shared.py --period 1.0 --seconds 40
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import pynvml

from collector.cli import build_node
from collector.settings import parse_settings
from harness.node import proc_tree
from harness.node.kubelet import PodResourcesServer, gpu_pod
from harness.node.pod_directory import StaticPodDirectory

HEAVY_UID, LIGHT_UID = "00000000-0000-4000-8000-00000000aaaa", "00000000-0000-4000-8000-00000000bbbb"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    uuid = pynvml.nvmlDeviceGetUUID(handle)

    def load(duty: float) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "loadgen", "run", "--kind", "gemm-bf16", "--seconds", str(args.seconds + 10),
               "--duty", str(duty), "--period", str(args.period)]  # fmt: skip
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    heavy, light = load(0.9), load(0.2)
    tree = proc_tree.ProcTree(tmp / "proc")
    tree.add(heavy.pid, proc_tree.v2_systemd(HEAVY_UID))
    tree.add(light.pid, proc_tree.v2_cgroupfs(LIGHT_UID))
    kubelet = PodResourcesServer(str(tmp / "kubelet.sock")).start()
    kubelet.pods = [gpu_pod("ml", "heavy", f"{uuid}::0", resource="nvidia.com/gpu.shared"),
                    gpu_pod("ml", "light", f"{uuid}::1", resource="nvidia.com/gpu.shared")]  # fmt: skip
    directory = StaticPodDirectory({HEAVY_UID: ("ml", "heavy"), LIGHT_UID: ("ml", "light")})
    settings = parse_settings(
        ["-k", "--pod-resources-kubelet-socket", kubelet.socket_path, "--proc-root", str(tree.root)], env={}
    )
    node = build_node(settings, pynvml, False, directory=directory)

    # NVML's own per-process samples, polled at 5 Hz beside the collector, for the record
    raw: dict[int, list[int]] = defaultdict(list)
    stop = threading.Event()

    def poll_raw() -> None:
        last = 0
        while not stop.is_set():
            try:
                samples = pynvml.nvmlDeviceGetProcessUtilization(handle, last)
            except pynvml.NVMLError:
                samples = []
            for s in samples:
                if s.timeStamp > last:
                    raw[s.pid].append(s.smUtil)
            last = max([last, *(s.timeStamp for s in samples)])
            time.sleep(0.2)

    while pynvml.nvmlDeviceGetUtilizationRates(handle).gpu < 50:
        await asyncio.sleep(0.2)
    await asyncio.sleep(2)
    assert node.watcher is not None  # -k
    node.start()
    refreshing = asyncio.create_task(node.watcher.run())  # on the event loop, as in the collector
    threading.Thread(target=poll_raw, daemon=True).start()
    rows = []
    started = time.monotonic()
    while time.monotonic() - started < args.seconds:
        await asyncio.sleep(1.0)
        values = {}
        for family in node.collection.latest.families:
            if family.name == "DCGM_FI_DEV_GPU_UTIL":
                for labels, value in family.samples:
                    values[dict(labels).get("pod", "device")] = value
        rows.append((time.monotonic() - started, values))
    stop.set()
    refreshing.cancel()
    node.stop()
    kubelet.stop()
    heavy.terminate()
    light.terminate()

    print(f"## two bf16 GEMM processes sharing the GPU, duty 0.9 and 0.2 of a {args.period} s period\n")
    print(f"heavy pid {heavy.pid} (pod ml/heavy), light pid {light.pid} (pod ml/light); collector window 10 s\n")
    print("NVML per-process samples (nvmlDeviceGetProcessUtilization polled at 5 Hz):\n")
    print("| process | samples | mean SM % of its samples |")
    print("|---|---|---|")
    for pid, name in ((heavy.pid, "heavy"), (light.pid, "light")):
        vals = raw.get(pid, [])
        print(f"| {name} ({pid}) | {len(vals)} | {statistics.mean(vals) if vals else 0:.1f} |")
    print("\nPer-pod DCGM_FI_DEV_GPU_UTIL from the collector, each second (device = the GPU-wide series):\n")
    print("| t (s) | device | ml/heavy | ml/light |")
    print("|---|---|---|---|")
    for t, v in rows:
        print(f"| {t:.0f} | {v.get('device', '')} | {v.get('heavy', '')} | {v.get('light', '')} |")
    steady = [v for t, v in rows if t >= 12 and "heavy" in v]
    if steady:
        means = {k: statistics.mean(v[k] for v in steady) for k in ("device", "heavy", "light")}
        print(
            f"\nsteady state (t >= 12 s, window full): device {means['device']:.1f}, "
            f"heavy {means['heavy']:.1f}, light {means['light']:.1f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
