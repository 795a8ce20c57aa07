"""Collector benchmark: /metrics latency (p50/p99) and CPU time per collection cycle.

Starts the real collector as a subprocess (simulated GPUs, or the machine's GPUs with --real), scrapes /metrics
over one keep-alive connection, and reads the collector's own CPU counters. Prints a Markdown table.

    python -m bench.collector_bench --simulate 1,8 [--real] [--requests 2000] [--collect-seconds 20]
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.nvml_costs import DCGM_EXPORTER_DEFAULT_FILE
from harness.processes import free_port


def scrape(conn: http.client.HTTPConnection) -> bytes:
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"/metrics answered {resp.status}")
    return body


def metric(body: bytes, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", body.decode(), re.M)
    if match is None:
        raise RuntimeError(f"{name} missing from /metrics")
    return float(match.group(1))


def process_ticks(pid: int) -> int:
    """User and system CPU of a process so far, in clock ticks (/proc/<pid>/stat fields 14 and 15)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115 (read at once)
    return int(fields[11]) + int(fields[12])


def rss_mib(pid: int) -> float:
    status = open(f"/proc/{pid}/status").read()  # noqa: SIM115 (read at once)
    return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1)) / 1024  # type: ignore[union-attr]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run_case(label: str, args: list[str], requests: int, collect_seconds: float) -> dict[str, object]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector", "-a", f"127.0.0.1:{port}", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                body = scrape(conn)
                if metric(body, "gpuscale_collector_collections_total") >= 2:
                    break
            except (OSError, RuntimeError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"collector for {label} did not start")
            time.sleep(0.2)
        gpus = int(metric(body, "gpuscale_collector_gpus"))
        series = sum(1 for line in body.decode().splitlines() if line.startswith("DCGM_"))
        latencies = []
        for _ in range(requests):
            t0 = time.perf_counter()
            scrape(conn)
            latencies.append((time.perf_counter() - t0) * 1000)
        # CPU per cycle over a window long enough to cover many cycles, from the collector's own counters.
        before, ticks = scrape(conn), process_ticks(proc.pid)
        time.sleep(collect_seconds)
        after, ticks = scrape(conn), process_ticks(proc.pid) - ticks
        cycles = metric(after, "gpuscale_collector_collections_total") - metric(
            before, "gpuscale_collector_collections_total"
        )
        cpu = metric(after, "gpuscale_collector_collection_cpu_seconds_total") - metric(
            before, "gpuscale_collector_collection_cpu_seconds_total"
        )
        return {
            "case": label,
            "gpus": gpus,
            "series": series,
            "p50_ms": percentile(latencies, 50),
            "p99_ms": percentile(latencies, 99),
            "cpu_ms_per_cycle": 1000 * cpu / max(cycles, 1),
            "cycles": int(cycles),
            "bytes": len(after),
            # the whole process (collection, scrapes of the window's two reads, the event loop), as top shows it
            "process_pct": 100 * ticks / os.sysconf("SC_CLK_TCK") / collect_seconds,
            "rss_mib": rss_mib(proc.pid),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simulate", default="1,8", help="comma-separated simulated GPU counts ('' for none)")
    parser.add_argument("--real", action="store_true", help="also measure the machine's real GPUs")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--collect-seconds", type=float, default=20.0)
    parser.add_argument(
        "--default-file", action="store_true", help="also each case with every field dcgm-exporter's default file lists"
    )
    args = parser.parse_args()
    cases = [(f"simulated x{n}", ["--simulate-gpus", n]) for n in args.simulate.split(",") if n]
    if args.real:
        cases.append(("real NVML", []))
    if args.default_file:
        path = Path(tempfile.mkdtemp()) / "default-counters.csv"
        path.write_text("".join(f"{name}, {kind}, {name}\n" for name, kind in DCGM_EXPORTER_DEFAULT_FILE))
        cases += [(f"{label}, dcgm-exporter's default file", [*extra, "-f", str(path)]) for label, extra in cases]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, "
        f"Python {platform.python_version()}"
    )
    print(f"{args.requests} sequential scrapes on one keep-alive connection; collection interval 1 s\n")
    print(
        "| case | GPUs | DCGM series | /metrics p50 (ms) | /metrics p99 (ms) | CPU per cycle (ms) "
        "| CPU at 1 s interval | whole process CPU | RSS (MiB) | body (bytes) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, extra in cases:
        r = run_case(label, extra, args.requests, args.collect_seconds)
        cpu = float(r["cpu_ms_per_cycle"])  # type: ignore[arg-type]
        print(
            f"| {r['case']} | {r['gpus']} | {r['series']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{cpu:.2f} | {cpu / 10:.2f} % of a core | {r['process_pct']:.2f} % | {r['rss_mib']:.1f} | {r['bytes']} |"
        )


if __name__ == "__main__":
    main()
