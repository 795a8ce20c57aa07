"""Resident memory across relists, with and without trimming the C heap after each (adapter/provider/discovery.py).

Each round reads what one relist of the built-in rules reads at 16,000 GPUs: 9 series listings of 16,000 series
with the collector's labels, each arriving in 64 KB pieces on the event loop and parsed in a worker thread (the
adapter's ``series_reply``), 4 at a time. Each mode runs in a fresh process.

    python -m bench.relist_heap [--rounds 25]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from adapter.backends.prometheus_answer import series_reply  # noqa: E402
from bench.adapter_bench import machine  # noqa: E402
from common.heap import malloc_trim  # noqa: E402

LISTINGS = 9
PARALLEL = 4  # adapter/provider/relist.py PARALLEL_REQUESTS
PIECE = 64 * 1024


def listing(name: str, gpus: int = 16_000) -> bytes:
    data = [
        {
            "__name__": name,
            "gpu": str(i % 8),
            "UUID": f"GPU-{i:08d}-0000-0000-0000-000000000000",
            "Hostname": f"node-{i // 8:05d}",
            "device": f"nvidia{i % 8}",
            "modelName": "NVIDIA H200",
            "namespace": f"team-{i % 100:03d}",
            "pod": f"gpu-{i:05d}",
            "container": "main",
            "instance": f"10.0.{i // 2000}.{i % 250}:9400",
            "job": "gpu",
        }
        for i in range(gpus)
    ]
    return json.dumps({"status": "success", "data": data}, separators=(",", ":")).encode()


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


async def read(body: bytes, slots: asyncio.Semaphore) -> None:
    async with slots:
        buffer = bytearray()
        for at in range(0, len(body), PIECE):
            buffer += body[at : at + PIECE]
            await asyncio.sleep(0)
        await asyncio.to_thread(series_reply, buffer)


async def rounds(count: int, trim: bool) -> dict[str, float]:
    bodies = [listing(f"DCGM_FIELD_{k}") for k in range(LISTINGS)]
    release = malloc_trim()
    slots = asyncio.Semaphore(PARALLEL)
    after: list[float] = []
    trims: list[float] = []
    for _ in range(count):
        await asyncio.gather(*(read(b, slots) for b in bodies))
        if trim:
            started = time.perf_counter()
            release()
            trims.append(time.perf_counter() - started)
        after.append(rss_mb())
    return {
        "first": after[0],
        "last": after[-1],
        "max": max(after),
        "trim_ms": 1000 * max(trims, default=0.0),
        "mb": sum(map(len, bodies)) / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--mode", choices=["plain", "trim"])
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(asyncio.run(rounds(args.rounds, args.mode == "trim"))))
        return
    print(f"Machine: {machine()}\n")
    rows = []
    for mode in ("plain", "trim"):
        out = subprocess.run(
            [sys.executable, __file__, "--rounds", str(args.rounds), "--mode", mode],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        rows.append((mode, json.loads(out)))
    each = rows[0][1]["mb"] / LISTINGS
    print(f"{args.rounds} relists, each {LISTINGS} listings of 16,000 series ({each:.1f} MB each)\n")
    print("| after each relist | RSS after the first (MB) | after the last | highest | growth | longest trim (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode, r in rows:
        what = "heap trimmed (the adapter)" if mode == "trim" else "nothing"
        trim_ms = f"{r['trim_ms']:.1f}" if mode == "trim" else "-"
        growth = r["last"] - r["first"]
        print(f"| {what} | {r['first']:.1f} | {r['last']:.1f} | {r['max']:.1f} | {growth:+.1f} | {trim_ms} |")


if __name__ == "__main__":
    main()
