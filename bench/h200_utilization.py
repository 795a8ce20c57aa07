"""Utilization under partial load on a real GPU: what each stage reports against the hardware's own count.

The whole chain runs (demo/stack.py): the collector on GPU 0 at its 1 s interval with one pod owning the GPU, a real
Prometheus scraping every second, the adapter with its defaults, and the custom metrics API as an HPA asks it. For
each cell of duty cycle x period a bf16 GEMM loop is busy for ``duty x period`` of every period; after a ramp, for
``--seconds`` this script reads every 0.5 s:

- truth: the GPU's graphics-engine activity from GPM, sampled by this script itself over the same seconds (x100);
- point: ``nvmlDeviceGetUtilizationRates`` read once a second, one short sample (what dcgm-exporter reports);
- collector: ``DCGM_FI_DEV_GPU_UTIL`` of the pod on the collector's /metrics (the interval mean);
- API: ``gpu_utilization`` and ``gpu_engine_active`` of the pod from the custom metrics API.

``--shared`` instead runs two loads on the one GPU, each in a pod of its own (time-slicing replicas), and each load
alone first, and compares each pod's ``gpu_utilization`` with what its load read alone.

    PYTHONPATH=. python bench/h200_utilization.py [--seconds 20] [--duties 0.1,0.25,0.5,0.75,1.0]
    PYTHONPATH=. python bench/h200_utilization.py --shared 0.6,0.2 --shared 0.3,0.3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pynvml

from demo.stack import Pod, Stack
from harness.node.proc_tree import ProcTree, v2_systemd

POD_UTIL = re.compile(r'^DCGM_FI_DEV_GPU_UTIL\{[^}]*pod="([^"]+)"[^}]*\} (\S+)$', re.M)


@dataclass
class Readings:
    truth: list[float] = field(default_factory=list)
    point: list[float] = field(default_factory=list)
    collector: dict[str, list[float]] = field(default_factory=dict)
    api: dict[str, list[float]] = field(default_factory=dict)
    engine: dict[str, list[float]] = field(default_factory=dict)
    truth_overall: float | None = None


class Gpm:
    """GPM's graphics-engine activity between two of this script's own samples."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._samples = [pynvml.nvmlGpmSampleAlloc() for _ in range(3)]

    def take(self, slot: int) -> None:
        pynvml.nvmlGpmSampleGet(self._handle, self._samples[slot])

    def busy(self, first: int, second: int) -> float:
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 1
        request.sample1, request.sample2 = self._samples[first], self._samples[second]
        request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL
        pynvml.nvmlGpmMetricsGet(request)
        return float(request.metrics[0].value)


async def start_load(duty: float, period: float, seconds: float) -> tuple[asyncio.subprocess.Process, float]:
    """A bf16 GEMM loop; returns once its kernels are warm (the load's own marker), with that moment."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "loadgen", "run", "--kind", "gemm-bf16", "--seconds", str(seconds),
        "--duty", str(duty), "--period", str(period),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    async for raw in process.stderr:
        line = raw.decode(errors="replace")
        if "load started at " in line:
            asyncio.get_running_loop().create_task(_drain(process.stderr))
            return process, float(line.rsplit(" ", 1)[1])
    raise RuntimeError(f"the load (duty {duty}, period {period}) ended before it started")


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


async def read(
    stack: Stack, session: aiohttp.ClientSession, handle: Any, gpm: Gpm, seconds: float, pods: Sequence[str]
) -> Readings:
    out = Readings()
    selector = "app=" + ("trainer" if len(pods) == 1 else "shared")
    gpm.take(0)
    gpm.take(1)
    started = time.monotonic()
    tick = 0
    while time.monotonic() - started < seconds:
        if tick % 2 == 0:
            out.point.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
            gpm.take(2)
            out.truth.append(gpm.busy(1, 2))
            gpm.take(1)
        async with session.get(f"{stack.collector_url}/metrics") as resp:
            for pod, value in POD_UTIL.findall(await resp.text()):
                out.collector.setdefault(pod, []).append(float(value))
        for name, values in (("gpu_utilization", out.api), ("gpu_engine_active", out.engine)):
            for pod, value in (await stack.pod_metric(name, selector)).items():
                values.setdefault(pod, []).append(value)
        tick += 1
        await asyncio.sleep(max(0.0, started + tick * 0.5 - time.monotonic()))
    gpm.take(2)
    out.truth_overall = gpm.busy(0, 2)
    return out


def stats(values: Sequence[float]) -> str:
    if not values:
        return "absent"
    sd = statistics.pstdev(values)
    return f"{statistics.mean(values):.1f} (sd {sd:.1f}; {min(values):.0f}-{max(values):.0f})"


def mean(values: Sequence[float]) -> float | None:
    return statistics.mean(values) if values else None


async def matrix(args: argparse.Namespace, stack: Stack, handle: Any, uuid: str) -> None:
    stack.set_pods([Pod("trainer-0", {"app": "trainer"}, (uuid,))])
    await wait_for(stack, "trainer-0", "app=trainer")
    gpm = Gpm(handle)
    print("| duty | period (s) | truth: GPM engine x100 | point sample | collector DCGM_FI_DEV_GPU_UTIL | "
          "API gpu_utilization | API gpu_engine_active | API - truth | within 3, sd <= 2 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        for period in args.periods:
            for duty in args.duties:
                load, _ = await start_load(duty, period, args.ramp + args.seconds + 2)
                await asyncio.sleep(args.ramp)
                r = await read(stack, session, handle, gpm, args.seconds, ["trainer-0"])
                load.terminate()
                await load.wait()
                api = r.api.get("trainer-0", [])
                truth = r.truth_overall if r.truth_overall is not None else 0.0
                off = mean(api)
                ok = off is not None and abs(off - truth) <= 3 and statistics.pstdev(api) <= 2
                print(
                    f"| {duty} | {period} | {truth:.1f} | {stats(r.point)} | {stats(r.collector.get('trainer-0', []))} "
                    f"| {stats(api)} | {stats(r.engine.get('trainer-0', []))} | "
                    f"{'' if off is None else f'{off - truth:+.1f}'} | {'yes' if ok else 'NO'} |",
                    flush=True,
                )
                await asyncio.sleep(1.5)  # idle between cells, so no window spans two loads


async def shared(args: argparse.Namespace, stack: Stack, handle: Any, uuid: str, workdir: Path) -> None:
    proc = ProcTree(workdir / "proc")
    gpm = Gpm(handle)
    alone: dict[float, float | None] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        stack.set_pods([Pod("solo", {"app": "trainer"}, (uuid,))])
        await wait_for(stack, "solo", "app=trainer")
        print("Each load alone, its pod owning the GPU:\n")
        print("| duty | truth: GPM engine x100 | API gpu_utilization |")
        print("|---|---|---|")
        for duty in sorted({d for pair in args.shared for d in pair}):
            load, _ = await start_load(duty, args.shared_period, args.ramp + args.seconds + 2)
            await asyncio.sleep(args.ramp)
            r = await read(stack, session, handle, gpm, args.seconds, ["solo"])
            load.terminate()
            await load.wait()
            alone[duty] = mean(r.api.get("solo", []))
            print(f"| {duty} | {r.truth_overall:.1f} | {stats(r.api.get('solo', []))} |", flush=True)
            await asyncio.sleep(1.5)
        print(f"\nTwo loads sharing the GPU (period {args.shared_period} s), a pod each; the collector splits the "
              "device's interval mean by NVML's per-process samples over a 10 s window:\n")  # fmt: skip
        print("| loads | truth: GPM engine x100 | device (collector) | pod | API gpu_utilization | alone | "
              "pod - alone | pods' sum - device |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|")
        for pair in args.shared:
            loads = [await start_load(duty, args.shared_period, args.share_ramp + args.seconds + 15) for duty in pair]
            pods = []
            for i, ((process, _), duty) in enumerate(zip(loads, pair, strict=True)):
                uid = f"00000000-0000-4000-8000-{i:012d}"
                proc.add(process.pid, v2_systemd(uid))
                pods.append(Pod(f"share-{i}-duty-{duty}", {"app": "shared"}, (f"{uuid}::{i}",),
                                resource="nvidia.com/gpu.shared", uid=uid))  # fmt: skip
            stack.set_pods(pods)
            await asyncio.sleep(args.share_ramp)  # the per-process window (10 s) fills
            r = await read(stack, session, handle, gpm, args.seconds, [p.name for p in pods])
            device = await device_util(stack, session)
            for process, _ in loads:
                with contextlib.suppress(ProcessLookupError):  # a load that already finished
                    process.terminate()
                await process.wait()
            per_pod = {p.name: mean(r.api.get(p.name, [])) for p in pods}
            total = sum(v for v in per_pod.values() if v is not None)
            for pod, duty in zip(pods, pair, strict=True):
                value, solo = per_pod[pod.name], alone.get(duty)
                diff = "" if value is None or solo is None else f"{value - solo:+.1f}"
                print(
                    f"| {' + '.join(map(str, pair))} | {r.truth_overall:.1f} | {device:.1f} | {pod.name} | "
                    f"{stats(r.api.get(pod.name, []))} | {'' if solo is None else f'{solo:.1f}'} | {diff} | "
                    f"{total - device:+.1f} |",
                    flush=True,
                )
            await asyncio.sleep(1.5)


async def device_util(stack: Stack, session: aiohttp.ClientSession) -> float:
    """The collector's device-wide DCGM_FI_DEV_GPU_UTIL of GPU 0, averaged over a few reads."""
    pattern = re.compile(r'^DCGM_FI_DEV_GPU_UTIL\{(?![^}]*pod=)[^}]*gpu="0"[^}]*\} (\S+)$', re.M)
    values = []
    for _ in range(4):
        async with session.get(f"{stack.collector_url}/metrics") as resp:
            values += [float(v) for v in pattern.findall(await resp.text())]
        await asyncio.sleep(0.5)
    return statistics.mean(values) if values else float("nan")


async def wait_for(stack: Stack, pod: str, selector: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while pod not in await stack.pod_metric("gpu_utilization", selector):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the custom metrics API never served {pod}")
        await asyncio.sleep(0.5)


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duties", type=floats, default=[0.1, 0.25, 0.5, 0.75, 1.0])
    parser.add_argument("--periods", type=floats, default=[0.02, 0.2, 1.0])
    parser.add_argument("--seconds", type=float, default=20.0, help="steady seconds read per cell")
    parser.add_argument("--ramp", type=float, default=3.0, help="seconds after a load starts before reading")
    parser.add_argument("--shared", type=floats, action="append", default=[], help="two duties sharing the GPU")
    parser.add_argument("--shared-period", type=float, default=1.0)
    parser.add_argument("--share-ramp", type=float, default=12.0)
    args = parser.parse_args()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    uuid, model = pynvml.nvmlDeviceGetUUID(handle), pynvml.nvmlDeviceGetName(handle)
    print(
        f"machine: {platform.machine()}, {model}, driver {pynvml.nvmlSystemGetDriverVersion()}, Python "
        f"{platform.python_version()}; collector interval 1 s, Prometheus scrape 1 s, adapter defaults; "
        f"{args.seconds:.0f} s read per cell after a {args.ramp:.0f} s ramp\n"
    )
    workdir = Path(tempfile.mkdtemp(prefix="utilization-"))
    collector_args: list[str] = []
    if args.shared:
        ProcTree(workdir / "proc")
        collector_args = ["--proc-root", str(workdir / "proc")]
    async with Stack(workdir, collector_args=collector_args) as stack:
        with contextlib.suppress(KeyboardInterrupt):
            if args.shared:
                await shared(args, stack, handle, uuid, workdir)
            else:
                await matrix(args, stack, handle, uuid)


if __name__ == "__main__":
    asyncio.run(main())
