"""Where a collector's resident memory goes: the interpreter, each library as it is imported, the collector's own
modules, and what the running process holds beyond its code (its Python objects, by tracemalloc).

The collector runs as ``bench/collector_memory.py`` runs a ``-k`` case (the API stand-in with pods on the node, the
kubelet's pod-resources, 8 simulated GPUs, the given counters), under a small wrapper that writes, on SIGUSR1, the
modules it has loaded and its RSS, and, when tracing, what tracemalloc saw allocated since its imports:

1. the collector, untraced: its RSS after warm-up and scrapes, and the modules it loaded;
2. a fresh interpreter of the same tree importing, one step after the other, the libraries in the order the
   collector needs them, then every other module the collector had loaded: RSS after each step (``VmRSS``). The
   last line is the collector's code alone; the collector's RSS less that is what it holds while it runs;
3. the collector again, with every one of those modules imported before tracemalloc starts: the Python memory
   allocated since (objects, buffers), by the package of the line that allocated it, and its peak.

    python -m bench.collector_memory_parts [--tree PATH] [--kube in-cluster|kubeconfig] [--counters default|every]
        [--gpus 8] [--pods 64] [--scrapes 2000] [-- collector flags (default: -k --kubernetes-enable-pod-labels)]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.collector_memory import (
    ROOT,
    Kubernetes,
    default_counters_file,
    every_field_file,
    get,
    kubernetes,
    wait_cycles,
    wait_for_pods,
)
from collector.simulation.nvml import SimulatedNvml
from harness.processes import free_port

MIB = 1024 * 1024

# The collector's process, but for the wrapper: on SIGUSR1 it writes what it loaded and, when tracing, what it holds.
_WRAPPER = """
import importlib, json, signal, sys, tracemalloc
from pathlib import Path
out, account, preload, argv = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
if preload:
    for name in json.loads(Path(preload).read_text()):
        try:
            importlib.import_module(name)
        except Exception:
            pass
    tracemalloc.start()

def package(filename):
    parts = Path(filename).parts
    for i, part in enumerate(parts):
        if part in ("collector", "common") and i + 1 < len(parts) and "site-packages" not in parts:
            return part + "/"
        if part == "site-packages" and i + 1 < len(parts):
            return parts[i + 1].split(".")[0].removesuffix(".py")
    name = Path(filename).stem if len(parts) < 2 else parts[-2] if parts[-2] != "python3.11" else Path(filename).stem
    return "stdlib " + name if filename.startswith(sys.base_prefix) else filename

def dump(*_):
    report = {"modules": list(sys.modules),  # in the order imported: each imports as it did in the collector
              "rss": int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) * 1024}
    if tracemalloc.is_tracing():
        by = {}
        for stat in tracemalloc.take_snapshot().statistics("filename"):
            key = package(stat.traceback[0].filename)
            by[key] = by.get(key, 0) + stat.size
        report["traced"], report["peak"] = tracemalloc.get_traced_memory()
        report["by_package"] = by
    out.write_text(json.dumps(report))

signal.signal(signal.SIGUSR1, dump)
from collector.cli import main
main(argv, **({"service_account": Path(account)} if account else {}))
"""

# What a -k collector imports, in the order it needs them; a step naming a module the collector did not load is
# left out.
STEPS: list[tuple[str, list[str]]] = [
    ("ssl (OpenSSL)", ["ssl"]),
    ("asyncio", ["asyncio"]),
    ("h11 (HTTP/1.1: the server and the Kubernetes client)", ["h11"]),
    ("pynvml", ["pynvml"]),
    ("the collector's pipeline (cli, collection, nvml/, counters/, simulation/, server)", ["collector.cli"]),
    ("h2 (the kubelet's List as one HTTP/2 request)", ["h2.connection"]),
    ("the collector's pods/ (attribution, pod directory, labels, pod-resources client and its wire reader)",
     ["collector.pods.attribution", "collector.pods.directory", "collector.pods.pod_resources"]),
    ("the collector's kube/ (its client and watch)", ["collector.kube.client", "collector.kube.watch"]),
    ("yaml", ["yaml"]),
]  # fmt: skip

_IMPORTS = """
import importlib, json, sys
from pathlib import Path
def rss():
    return int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) * 1024
steps, rest = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rows = [("interpreter", rss(), len(sys.modules))]
for name, modules in steps + [("every other module the collector loaded", rest)]:
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:
            pass
    rows.append((name, rss(), len(sys.modules)))
print(json.dumps(rows))
"""


@contextmanager
def collector(
    tree: Path, kube: Kubernetes, counters: Path, args: argparse.Namespace, report: Path, preload: Path | None
) -> Iterator[int]:
    """The collector under the wrapper; yields its pid once warm, its pods attached, and scraped."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree), **kube.env}
    account = str(kube.service_account or "")
    command = [sys.executable, "-c", _WRAPPER, str(report), account, str(preload or ""),
               "--simulate-gpus", str(args.gpus), "-f", str(counters), "-a", f"127.0.0.1:{port}", *kube.flags,
               *args.flags]  # fmt: skip
    log = report.with_suffix(".log")
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                get(conn)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"collector did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        wait_cycles(conn, 10, 120)
        wait_for_pods(conn, min(args.gpus, args.pods), log)
        for i in range(args.scrapes):
            get(conn, "application/openmetrics-text; version=1.0.0" if i % 2 else "")
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def report_of(pid: int, report: Path) -> dict[str, Any]:
    report.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while not report.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the collector wrote no report")
        time.sleep(0.1)
    time.sleep(0.2)  # written in full
    result: dict[str, Any] = json.loads(report.read_text())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", default=str(ROOT), help="the checkout whose collector runs (default: this one)")
    parser.add_argument("--kube", choices=("in-cluster", "kubeconfig"), default="in-cluster")
    parser.add_argument("--counters", choices=("every", "default"), default="default")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--scrapes", type=int, default=2000)
    parser.add_argument("flags", nargs="*", default=["-k", "--kubernetes-enable-pod-labels"])
    args = parser.parse_args()
    tree = Path(args.tree).resolve()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        counters = every_field_file(work) if args.counters == "every" else default_counters_file(work)
        with kubernetes(work / "kube", args.pods, SimulatedNvml(args.gpus).uuids(), args.kube) as kube:
            with collector(tree, kube, counters, args, work / "plain.json", None) as pid:
                plain = report_of(pid, work / "plain.json")
            modules = [m for m in plain["modules"] if m != "__main__"]
            steps = [(name, mods) for name, mods in STEPS if set(mods) <= set(modules)]
            out = subprocess.run(
                [sys.executable, "-c", _IMPORTS, json.dumps(steps), json.dumps(modules)],
                cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True, check=True,
            )  # fmt: skip
            rows = json.loads(out.stdout)
            (preload := work / "modules.json").write_text(json.dumps(modules))
            with collector(tree, kube, counters, args, work / "traced.json", preload) as pid:
                traced = report_of(pid, work / "traced.json")
    print(f"collector of {tree}, {' '.join(args.flags)}, {args.kube}, {args.gpus} simulated GPUs, {args.pods} pods, "
          f"counters: {args.counters}; {len(modules)} modules loaded\n")  # fmt: skip
    print("| step | modules | RSS after (MiB) | added (MiB) |")
    print("|---|---|---|---|")
    last = 0
    for name, rss, count in rows:
        print(f"| {name} | {count} | {rss / MIB:.1f} | {(rss - last) / MIB if last else rss / MIB:.1f} |")
        last = rss
    print(f"| the running collector (untraced) | {len(modules)} | {plain['rss'] / MIB:.1f} | "
          f"{(plain['rss'] - last) / MIB:.1f} |\n")  # fmt: skip
    print(f"Python memory allocated after the imports (tracemalloc): {traced['traced'] / MIB:.2f} MiB now, "
          f"{traced['peak'] / MIB:.2f} MiB at the peak; by the package of the allocating line:\n")  # fmt: skip
    print("| package | KiB |")
    print("|---|---|")
    for name, size in sorted(traced["by_package"].items(), key=lambda kv: -kv[1])[:15]:
        print(f"| {name} | {size / 1024:.0f} |")


if __name__ == "__main__":
    main()
