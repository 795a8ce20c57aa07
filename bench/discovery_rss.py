"""The adapter's resident memory and time to its first relist with prometheus-adapter's catch-all rule over every
series (the built-in rules plus ``{namespace!="",__name__!~"^container_.*"}`` with ``<<.Resource>>``), against a
real Prometheus holding N series of 50 metric names.

    python -m bench.discovery_rss --series 200000 [--before DIR]

``--before`` names another checkout (``git archive <commit> adapter common | tar -x -C DIR``): its adapter is measured
alternately with this one, twice each, over the same Prometheus.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from bench.adapter_bench import catch_all_config, machine, metric_value, rss_mb, wide_exposition
from harness.kube.api import FakeKubeAPIServer
from harness.processes import free_port
from harness.stores.exporter import Exporter
from harness.stores.prometheus import run_prometheus

ROOT = Path(__file__).resolve().parents[1]
NAMES = 50


def start_adapter(
    root: Path, port: int, prom_url: str, kubeconfig: Path, config: Path, log: Path
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                sys.executable, "-m", "adapter", f"--prometheus-url={prom_url}", f"--lister-kubeconfig={kubeconfig}",
                "--insecure-serve-http", "--insecure-disable-auth", "--bind-address=127.0.0.1", f"--secure-port={port}",
                "--prometheus-timeout=60s", "--metrics-relist-interval=10m", f"--config={config}",
            ],
            cwd=root,
            stderr=out,
            env={**os.environ, "PYTHONPATH": str(root)},
        )  # fmt: skip


def exited(root: Path, log: Path) -> RuntimeError:
    return RuntimeError(f"the adapter of {root} exited: {log.read_text()[-2000:]}")


async def measure(root: Path, prom_url: str, kubeconfig: Path, config: Path, log: Path) -> str:
    port = free_port()
    started = time.monotonic()
    proc = start_adapter(root, port, prom_url, kubeconfig, config, log)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            while True:
                if proc.poll() is not None:
                    raise exited(root, log)
                try:
                    runs = await metric_value(session, url, "gpuscale_adapter_discovery_runs_total", 'result="success"')
                    if runs >= 1:
                        break
                except (aiohttp.ClientError, ValueError, KeyError):
                    pass
                await asyncio.sleep(0.2)
            took = time.monotonic() - started
            metrics = await metric_value(session, url, "gpuscale_adapter_discovered_metrics", 'api="custom"')
            rss, peak = rss_mb(proc.pid)
            return f"| {root} | {int(metrics)} | {took:.1f} | {rss:.0f} | {peak:.0f} |"
    finally:
        proc.terminate()
        proc.wait(30)


async def run(series: int, before: Path | None, work: Path) -> None:
    kube = FakeKubeAPIServer()
    kube.put("namespaces", "wide-0")
    await kube.start()
    kubeconfig = kube.kubeconfig(work / "kubeconfig")
    config = catch_all_config(work / "catch-all.yaml")
    slow = {"scrape_interval": "60s", "scrape_timeout": "55s", "evaluation_interval": "60s"}
    print(f"Machine: {machine()}\n")
    print(f"{series:,} series, {NAMES} metric names\n")
    print("| adapter | metrics discovered | start to first relist (s) | RSS (MB) | peak RSS (MB) |")
    print("|---|---:|---:|---:|---:|")
    try:
        with (
            Exporter(wide_exposition(series, NAMES)) as exporter,
            run_prometheus(
                work / "prom", [exporter.target], scrape_interval="60s", extra_config={"global": slow}
            ) as prom,
        ):
            prom.wait_for(f"count(DCGM_BENCH_FIELD_000) >= {series // NAMES}", timeout=900)
            roots = [before, ROOT] * 2 if before else [ROOT, ROOT]
            for i, root in enumerate(roots):
                print(await measure(root, prom.url, kubeconfig, config, work / f"adapter-{i}.log"), flush=True)
    finally:
        await kube.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=200_000)
    parser.add_argument("--before", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="discovery-rss-")).resolve()
    asyncio.run(run(args.series, args.before.resolve() if args.before else None, work))


if __name__ == "__main__":
    main()
