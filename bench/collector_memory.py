"""Collector memory: resident set (RSS), proportional (PSS) and unique (USS) memory of the real collector process.

Starts ``python -m collector --simulate-gpus N`` with a counters file that lists every field the collector serves
(every series and every label field), waits for the warm-up cycles, reads ``/proc/<pid>/smaps_rollup``, then scrapes
/metrics many times (text and OpenMetrics) and reads it again after more cycles. Each case can set environment
variables (``MALLOC_ARENA_MAX=2``) or add flags. Prints a Markdown table.

    python -m bench.collector_memory [--gpus 8] [--scrapes 2000] [--cycles 60]
        [--case 'default' --case 'arenas=2:MALLOC_ARENA_MAX=2']

USS is the memory that would be freed if the process ended (private pages); PSS adds its share of pages it maps with
other processes (the Python binary, shared libraries); RSS counts shared pages whole, as ``kubectl top`` and the
kubelet's memory limit do (the cgroup charges pages to the first process that touched them).
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TypedDict

from collector.nvml.fields import FIELDS, LABEL_FIELDS

KIB = 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def every_field_file(directory: Path) -> Path:
    """A counters file listing every field this collector serves, each with the type its table gives."""
    lines = [f"{name}, {field.type}, {name}" for name, field in FIELDS.items()]
    lines += [f"{name}, label, {name}" for name in sorted(LABEL_FIELDS)]
    path = directory / "every-field.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def memory(pid: int) -> dict[str, float]:
    """MiB figures from smaps_rollup (RSS, PSS, USS, anonymous) and the peak RSS from status."""
    rollup = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        rollup[key] = int(value.split()[0]) * KIB
    status = Path(f"/proc/{pid}/status").read_text()
    hwm = int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.M).group(1)) * KIB  # type: ignore[union-attr]
    mib = 1024 * 1024
    return {
        "rss": rollup["Rss"] / mib,
        "pss": rollup["Pss"] / mib,
        "uss": (rollup["Private_Clean"] + rollup["Private_Dirty"]) / mib,
        "anon": rollup["Anonymous"] / mib,
        "hwm": hwm / mib,
    }


def get(conn: http.client.HTTPConnection, accept: str = "") -> bytes:
    conn.request("GET", "/metrics", headers={"Accept": accept} if accept else {})
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"/metrics answered {resp.status}")
    return body


def cycles(body: bytes) -> int:
    match = re.search(rb"^gpuscale_collector_collections_total (\S+)$", body, re.M)
    return int(float(match.group(1))) if match else 0


def wait_cycles(conn: http.client.HTTPConnection, at_least: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        body = get(conn)
        if cycles(body) >= at_least:
            return body
        if time.monotonic() > deadline:
            raise RuntimeError(f"the collector did not reach {at_least} cycles in {timeout:.0f} s")
        time.sleep(0.2)


class CaseResult(TypedDict):
    case: str
    series: int
    bytes: int
    warm: dict[str, float]
    scraped: dict[str, float]
    later: dict[str, float]


def run_case(
    name: str, env_extra: dict[str, str], flags: list[str], args: argparse.Namespace, counters: Path
) -> CaseResult:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **env_extra}
    command = [sys.executable, "-m", "collector", "--simulate-gpus", str(args.gpus), "-f", str(counters)]
    log = counters.parent / f"collector-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*command, "-a", f"127.0.0.1:{port}", *flags], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                body = get(conn)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: collector did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        body = wait_cycles(conn, args.warmup, 120)
        series = sum(1 for line in body.splitlines() if line.startswith(b"DCGM_"))
        warm = memory(proc.pid)
        for i in range(args.scrapes):
            get(conn, "application/openmetrics-text; version=1.0.0" if i % 2 else "")
        scraped = memory(proc.pid)
        wait_cycles(conn, cycles(get(conn)) + args.cycles, args.cycles * 3 + 60)
        later = memory(proc.pid)
        return {"case": name, "series": series, "bytes": len(body), "warm": warm, "scraped": scraped, "later": later}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def parse_case(text: str) -> tuple[str, dict[str, str], list[str]]:
    """``name[:VAR=value,...][:--flag ...]`` → (name, environment, flags)."""
    name, _, rest = text.partition(":")
    env_text, _, flag_text = rest.partition(":")
    env = dict(pair.split("=", 1) for pair in env_text.split(",") if pair)
    return name, env, flag_text.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=10, help="collection cycles before the first reading")
    parser.add_argument("--scrapes", type=int, default=2000, help="scrapes between the first and second reading")
    parser.add_argument("--cycles", type=int, default=60, help="further cycles before the last reading")
    parser.add_argument("--case", action="append", help="name[:VAR=value,...][:flags]; repeatable")
    args = parser.parse_args()
    cases = [parse_case(c) for c in (args.case or ["default"])]
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines()
    model = next((line.split(":", 1)[1].strip() for line in lscpu if line.startswith("Model name")), "?")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs ({model}), {platform.platform()}, "
        f"Python {platform.python_version()}"
    )
    print(
        f"{args.gpus} simulated GPUs, every field enabled; readings after {args.warmup} cycles (warm), after "
        f"{args.scrapes} scrapes (scraped) and {args.cycles} cycles later (later); MiB\n"
    )
    print("| case | DCGM series | body (bytes) | when | RSS | PSS | USS | anonymous | peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        counters = every_field_file(Path(tmp))
        for name, env, flags in cases:
            r = run_case(name, env, flags, args, counters)
            for when, m in (("warm", r["warm"]), ("scraped", r["scraped"]), ("later", r["later"])):
                print(
                    f"| {r['case']} | {r['series']} | {r['bytes']} | {when} | {m['rss']:.1f} | {m['pss']:.1f} | "
                    f"{m['uss']:.1f} | {m['anon']:.1f} | {m['hwm']:.1f} |"
                )


if __name__ == "__main__":
    main()
