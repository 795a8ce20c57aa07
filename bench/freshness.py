"""Freshness: seconds from a GPU load starting (stopping) until each stage of the chain shows it.

The whole chain runs (demo/stack.py): the collector on this machine's GPU 0 at its 1 s interval, a real Prometheus
scraping it every second, the adapter with its default settings, and the custom metrics API as the HPA asks it.
A bf16 GEMM loop runs for --load-seconds; the load generator prints the wall-clock moment its first kernels
finished warming up ("load started at") and the moment it stopped. Every 0.1 s this script reads NVML itself,
the collector's /metrics, Prometheus's instant query and the custom metrics API, and reports when each first showed
at least 90 % of the loaded value after the start, and below 10 % of it after the stop.

"NVML" is the mean of GPU 0's utilization samples over the last second of NVML's clock, computed here from
``nvmlDeviceGetSamples`` at each read: the earliest a one-second mean can show the load. What each later stage adds
over the one before it is its own share of the delay: the collector's cycle (when it runs relative to the samples),
Prometheus's scrape (when it scrapes relative to the cycle), the adapter (its value cache and query).

    python -m bench.freshness [--runs 2] [--load-seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import pynvml

from demo.stack import Pod, Stack

UTIL = re.compile(r'^DCGM_FI_DEV_GPU_UTIL\{[^}]*pod="trainer-0"[^}]*\} (\S+)$', re.M)


STAGES = ("nvml", "collector", "prometheus", "api")
NAMES = {"nvml": "NVML, 1 s mean", "collector": "collector", "prometheus": "prometheus", "api": "custom metrics API"}


def nvml_mean(handle: object) -> float | None:
    """The time-weighted mean of the GPU's utilization samples over the last second of NVML's clock."""
    try:
        _, samples = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    except pynvml.NVMLError:
        return None
    points = sorted((int(s.timeStamp), float(s.sampleValue.uiVal)) for s in samples)
    if len(points) < 2:
        return None
    end = points[-1][0]
    weighted = covered = 0.0
    for (before, _), (ts, value) in itertools.pairwise(points):
        overlap = ts - max(before, end - 1_000_000)
        if overlap > 0:
            weighted, covered = weighted + value * overlap, covered + overlap
    return weighted / covered if covered else None


async def sample(stack: Stack, session: aiohttp.ClientSession, handle: object) -> dict[str, float | None]:
    out: dict[str, float | None] = {"nvml": await asyncio.to_thread(nvml_mean, handle)}
    async with session.get(f"{stack.collector_url}/metrics") as resp:
        match = UTIL.search(await resp.text())
        out["collector"] = float(match.group(1)) if match else None
    assert stack.prometheus is not None
    result = await asyncio.to_thread(stack.prometheus.query, 'DCGM_FI_DEV_GPU_UTIL{pod="trainer-0"}')
    out["prometheus"] = float(result[0]["value"][1]) if result else None
    values = await stack.pod_metric("gpu_utilization", "app=trainer")
    out["api"] = values.get("trainer-0")
    return out


async def one_run(
    stack: Stack, handle: object, load_seconds: float, tail: float
) -> dict[str, tuple[float | None, float | None]]:
    samples: list[tuple[float, dict[str, float | None]]] = []
    marks: dict[str, float] = {}
    load = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "loadgen", "run", "--kind", "gemm-bf16", "--seconds", str(load_seconds),
        stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip

    async def read_marks() -> None:
        assert load.stderr is not None
        async for raw in load.stderr:
            line = raw.decode(errors="replace")
            for word in ("started", "stopped"):
                if f"load {word} at " in line:
                    marks[word] = float(line.rsplit(" ", 1)[1])

    reader = asyncio.create_task(read_marks())
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while "stopped" not in marks or time.time() < marks["stopped"] + tail:
            t = time.time()
            samples.append((t, await sample(stack, session, handle)))
            await asyncio.sleep(max(0.0, 0.1 - (time.time() - t)))
    await load.wait()
    await reader
    start, stop = marks["started"], marks["stopped"]
    results = {}
    for stage in STAGES:
        # one name per reading, so that a None check narrows it (an index by a variable key is not narrowed)
        readings = [(t, v[stage]) for t, v in samples]
        steady = [x for t, x in readings if start + 10 <= t <= stop and x is not None]
        loaded = statistics.median(steady) if steady else None
        up = down = None
        if loaded:
            up = next((t - start for t, x in readings if t >= start and (x or 0) >= 0.9 * loaded), None)
            down = next((t - stop for t, x in readings if t >= stop and x is not None and x < 0.1 * loaded), None)
        results[stage] = (up, down)
        results[f"{stage}-loaded"] = (loaded, None)
    return results


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--load-seconds", type=float, default=30.0)
    parser.add_argument("--tail", type=float, default=15.0, help="seconds to watch after the load stops")
    args = parser.parse_args()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    uuid, model = pynvml.nvmlDeviceGetUUID(handle), pynvml.nvmlDeviceGetName(handle)
    async with Stack(Path(tempfile.mkdtemp(prefix="freshness-"))) as stack:
        stack.set_pods([Pod("trainer-0", {"app": "trainer"}, (uuid,))])
        deadline = time.monotonic() + 60
        while "trainer-0" not in await stack.pod_metric("gpu_utilization", "app=trainer"):
            if time.monotonic() > deadline:
                raise RuntimeError("the custom metrics API never served trainer-0")
            await asyncio.sleep(0.5)
        runs = [await one_run(stack, handle, args.load_seconds, args.tail) for _ in range(args.runs)]
    print(
        f"machine: {platform.machine()}, {model}, Python {platform.python_version()}; collector interval 1 s, "
        f"Prometheus scrape 1 s, adapter defaults; {args.runs} run(s) of a {args.load_seconds:.0f} s bf16 GEMM\n"
    )
    print("| run | stage | loaded value | load start → >= 90 % (s) | load stop → < 10 % (s) |")
    print("|---|---|---|---|---|")

    def fmt(x: float | None) -> str:
        return "never" if x is None else f"{x:.1f}"

    for i, run in enumerate(runs, start=1):
        for stage in STAGES:
            up, down = run[stage]
            loaded = run[f"{stage}-loaded"][0]
            print(f"| {i} | {NAMES[stage]} | {fmt(loaded)} | {fmt(up)} | {fmt(down)} |")
    print("\nWhat each stage adds to the start's delay (s), run by run:\n")
    print("| run | NVML's 1 s mean reaches 90 % | + collector cycle | + Prometheus scrape | + adapter | total |")
    print("|---|---|---|---|---|---|")
    for i, run in enumerate(runs, start=1):
        ups = [run[stage][0] for stage in STAGES]
        if any(u is None for u in ups):
            print(f"| {i} | {' | '.join(fmt(u) for u in ups)} | |")
            continue
        steps = [ups[0], *(b - a for a, b in itertools.pairwise(ups))]  # type: ignore[operator]
        print(f"| {i} | {' | '.join(f'{x:.2f}' for x in steps)} | {ups[-1]:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
