"""Adapter benchmark: wildcard latency against the raw Prometheus query it wraps, cached throughput on one core,
Prometheus queries caused by identical concurrent requests, and resident memory after discovery.

Runs a real Prometheus scraping generated collector series, the Kubernetes API stand-in from harness/kube with the
matching pods, and the adapter as a subprocess pinned to CPU 0 (the load runs on CPU 1). Prints Markdown tables.

    python -m bench.adapter_bench [--sizes 3,100,1000,10000] [--requests 200] [--seconds 10] \
        [--rss-series 50000,1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]

from adapter.config.rules import default_rules_text  # noqa: E402
from harness.kube.api import FakeKubeAPIServer  # noqa: E402
from harness.processes import free_port, launched  # noqa: E402
from harness.stores.exporter import Exporter  # noqa: E402
from harness.stores.prometheus import Prometheus, run_prometheus  # noqa: E402

GPU = "DCGM_FI_DEV_GPU_UTIL"
CM = "/apis/custom.metrics.k8s.io/v1beta2"


def machine() -> str:
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    prom = subprocess.run(["prometheus", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    return (
        f"{platform.machine()}, {os.cpu_count()} cores ({model}), Linux {platform.release()}, "
        f"Python {platform.python_version()}, {prom}"
    )


def fleet_exposition(sizes: list[int]) -> str:
    lines = [f"# TYPE {GPU} gauge"]
    for n in sizes:
        for i in range(n):
            labels = (
                f'gpu="{i % 8}",UUID="GPU-{n}-{i}",Hostname="node-{i // 8}",pod="worker-{i:05d}",namespace="bench-{n}"'
            )
            lines.append(f"{GPU}{{{labels}}} {(i * 7) % 100}.5")
    return "\n".join(lines) + "\n"


def wide_exposition(series: int, names: int) -> str:
    """``series`` series over ``names`` metric names: one series per name for each of series/names GPU pods."""
    pods = series // names
    out = [f"# TYPE DCGM_BENCH_FIELD_{k:03d} gauge" for k in range(names)]
    for k in range(names):
        name = f"DCGM_BENCH_FIELD_{k:03d}"
        for i in range(pods):
            out.append(
                f'{name}{{gpu="{i % 8}",Hostname="node-{i // 8}",pod="gpu-pod-{i:06d}",namespace="wide-{i % 50}"}} {k}'
            )
    return "\n".join(out) + "\n"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


@contextmanager
def adapter_process(prom_url: str, kubeconfig: Path, *extra: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="adapter-bench-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        launched(
            [
                sys.executable,
                "-m",
                "adapter",
                f"--prometheus-url={prom_url}",
                f"--lister-kubeconfig={kubeconfig}",
                "--insecure-serve-http",
                "--insecure-disable-auth",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--prometheus-timeout=60s",
                *extra,
            ],
            {0},
        ),
        cwd=ROOT,
        stderr=log,
    )
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def python_hop(prom_url: str) -> Iterator[str]:
    """bench/python_hop.py, pinned to the adapter's CPU."""
    port = free_port()
    proc = subprocess.Popen(
        launched([sys.executable, "-m", "bench.python_hop", prom_url, str(port)], {0}),
        cwd=ROOT,
    )
    try:
        yield f"http://127.0.0.1:{port}/query"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def metric_value(session: aiohttp.ClientSession, url: str, name: str, labels: str = "") -> float:
    async with session.get(f"{url}/metrics") as resp:
        text = await resp.text()
    pattern = rf"^{re.escape(name)}{{{re.escape(labels)}}} (\S+)$" if labels else rf"^{re.escape(name)} (\S+)$"
    m = re.search(pattern, text, re.M)
    return float(m.group(1)) if m else 0.0


async def eventually(check: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            if await check():
                return
        except aiohttp.ClientError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what}")
        await asyncio.sleep(0.2)


async def ready(session: aiohttp.ClientSession, url: str) -> None:
    async def synced() -> bool:
        return await metric_value(session, url, "gpuscale_adapter_kube_cache_synced", 'resource="pods"') == 1

    async def relisted() -> bool:
        return await metric_value(session, url, "gpuscale_adapter_discovery_runs_total", 'result="success"') >= 1

    await eventually(synced, 120, "the pod cache")
    await eventually(relisted, 300, "a successful relist")


async def interleaved(requests: int, *calls: Callable[[], Awaitable[Any]]) -> list[list[float]]:
    for call in calls:
        await call()
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(requests):
        for call, out in zip(calls, times, strict=True):
            started = time.perf_counter()
            await call()
            out.append(time.perf_counter() - started)
    return times


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url} answered {resp.status}: {await resp.text()}")
        return await resp.json()


async def latency_table(
    session: aiohttp.ClientSession,
    prom: Prometheus,
    hop: str,
    uncached: str,
    cached: str,
    sizes: list[int],
    requests: int,
) -> list[str]:
    rows = [
        "| pods | raw Prometheus p50 / p99 (ms) | minimal Python hop p50 (ms) | hop ÷ raw | adapter, uncached "
        "p50 / p99 (ms) | adapter ÷ raw at p50 | adapter, cached p50 / p99 (ms) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        path = f"{CM}/namespaces/bench-{n}/pods/*/{'gpu_utilization'}?labelSelector=app%3Dbench"
        report = await get_json(session, f"{uncached}/explain{path}")
        promql = report["queries"][0]["promql"]
        if len(report["answer"]["items"]) != n:
            raise RuntimeError(f"expected {n} items, got {len(report['answer']['items'])}")

        async def raw(query: str = promql) -> Any:
            async with session.post(f"{prom.url}/api/v1/query", data={"query": query}) as resp:
                return await resp.read()

        async def via(base: str, p: str = path) -> Any:
            async with session.get(f"{base}{p}") as resp:
                if resp.status != 200:
                    raise RuntimeError(f"{p}: {resp.status}")
                return await resp.read()

        async def hopped(query: str = promql) -> Any:
            async with session.post(hop, data={"query": query}) as resp:
                return await resp.read()

        # interleaved, so drift in the machine's load hits the four alike
        raw_t, hop_t, unc_t, hit_t = await interleaved(
            requests, raw, hopped, lambda: via(uncached), lambda: via(cached)
        )
        ratio = statistics.median(unc_t) / statistics.median(raw_t)
        hop_ratio = statistics.median(hop_t) / statistics.median(raw_t)
        rows.append(
            f"| {n} | {ms(percentile(raw_t, 50))} / {ms(percentile(raw_t, 99))} "
            f"| {ms(percentile(hop_t, 50))} | {hop_ratio:.2f}x "
            f"| {ms(percentile(unc_t, 50))} / {ms(percentile(unc_t, 99))} | {ratio:.2f}x "
            f"| {ms(percentile(hit_t, 50))} / {ms(percentile(hit_t, 99))} |"
        )
    return rows


async def throughput(url: str, seconds: float, concurrency: int) -> tuple[float, float]:
    path = f"{url}{CM}/namespaces/bench-100/pods/*/gpu_utilization?labelSelector=app%3Dbench"
    done = 0
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                started = time.perf_counter()
                async with session.get(path) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"status {resp.status}")
                latencies.append(time.perf_counter() - started)
                done += 1

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - started
    return done / elapsed, percentile(latencies, 50)


async def shared_queries(url: str, tag: str) -> int:
    """Prometheus queries made for 100 identical requests sent at once."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        name, labels = "gpuscale_adapter_prometheus_request_duration_seconds_count", 'endpoint="query"'
        before = await metric_value(session, url, name, labels)
        # a metricLabelSelector no earlier request used gives a PromQL text the cache has not seen
        query = f"labelSelector=app%3Dbench&metricLabelSelector=UUID%21%3D{tag}"
        path = f"{url}{CM}/namespaces/bench-100/pods/*/gpu_utilization?{query}"
        bodies = await asyncio.gather(*(get_json(session, path) for _ in range(100)))
        if any(len(b["items"]) != 100 for b in bodies):
            raise RuntimeError("not every answer had 100 items")
        return int(await metric_value(session, url, name, labels) - before)


def rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def catch_all_config(path: Path) -> Path:
    """The built-in rules plus prometheus-adapter's classic catch-all rule, so discovery looks at every series."""
    config = yaml.safe_load(default_rules_text())
    config["rules"].append(
        {
            "seriesQuery": '{namespace!="",__name__!~"^container_.*"}',
            "resources": {"template": "<<.Resource>>"},
            "name": {"matches": "^(.*)$", "as": "${1}"},
            "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
        }
    )
    path.write_text(yaml.safe_dump(config))
    return path


async def rss_row(series: int, kube: FakeKubeAPIServer, kubeconfig: Path, work: Path) -> str:
    names = 50
    text = wide_exposition(series, names)
    (work / f"prom-{series}").mkdir()
    with (
        Exporter(text) as exporter,
        run_prometheus(
            work / f"prom-{series}",
            scrape_targets=[exporter.target],
            scrape_interval="60s",
            extra_config={"global": {"scrape_interval": "60s", "scrape_timeout": "55s", "evaluation_interval": "60s"}},
        ) as prom,
    ):
        # a scrape is committed whole, so one name having all its series means all names have theirs
        prom.wait_for(f"count(DCGM_BENCH_FIELD_000) >= {series // names}", timeout=900)
        config = catch_all_config(work / "catch-all.yaml")
        with adapter_process(prom.url, kubeconfig, f"--config={config}") as (url, proc):
            async with aiohttp.ClientSession() as session:
                await ready(session, url)
                metrics = await metric_value(session, url, "gpuscale_adapter_discovered_metrics", 'api="custom"')
                body = await get_json(session, f"{url}{CM}/namespaces/wide-0/pods/*/DCGM_BENCH_FIELD_000")
                rss, peak = rss_mb(proc.pid)
    return f"| {series:,} | {names} | {int(metrics)} | {len(body['items'])} | {rss:.0f} | {peak:.0f} |"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="3,100,1000,10000")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rss-series", default="50000,1000000")
    args = parser.parse_args()
    # the throughput and shared-query sections ask the 100-pod namespace, so it always exists
    sizes = sorted({int(s) for s in args.sizes.split(",")} | {100})
    os.sched_setaffinity(0, {1})
    work = Path(tempfile.mkdtemp(prefix="adapter-bench-"))
    print(f"Machine: {machine()}\n")

    kube = FakeKubeAPIServer()
    for n in sizes:
        kube.put("namespaces", f"bench-{n}")
        for i in range(n):
            kube.put("pods", f"worker-{i:05d}", {"app": "bench", "tier": "gpu"}, namespace=f"bench-{n}")
    wide_pods = max(int(s) for s in args.rss_series.split(",")) // 50 if args.rss_series else 0
    for i in range(wide_pods):
        kube.put("pods", f"gpu-pod-{i:06d}", {"app": "wide"}, namespace=f"wide-{i % 50}")
    await kube.start()
    kubeconfig = kube.kubeconfig(work / "kubeconfig")
    try:
        (work / "prom").mkdir()
        with Exporter(fleet_exposition(sizes)) as exporter, run_prometheus(work / "prom", [exporter.target]) as prom:
            prom.wait_for(f"count({GPU}) >= {sum(sizes)}")
            with (
                python_hop(prom.url) as hop,
                adapter_process(prom.url, kubeconfig, "--metrics-cache-ttl=0s") as (uncached, unc_proc),
                adapter_process(prom.url, kubeconfig, "--metrics-cache-ttl=10m") as (cached, _),
            ):
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=8)) as session:
                    await ready(session, uncached)
                    await ready(session, cached)
                    baseline_rss, _ = rss_mb(unc_proc.pid)
                    print("## Wildcard pods request (HPA form), sequential, one keep-alive connection\n")
                    table = await latency_table(session, prom, hop, uncached, cached, sizes, args.requests)
                    print("\n".join(table))
                shared_uncached = await shared_queries(uncached, "a")
                shared_cached = await shared_queries(cached, "b")
                rate, p50 = await throughput(cached, args.seconds, args.concurrency)
                print("\n## Cached requests, adapter on one core (CPU 0), load from CPU 1\n")
                print("| pods per answer | concurrency | requests/s | p50 (ms) |\n|---:|---:|---:|---:|")
                print(f"| 100 | {args.concurrency} | {rate:.0f} | {ms(p50)} |")
                print("\n## Prometheus queries caused by 100 identical concurrent requests\n")
                print("| adapter | queries |\n|---|---:|")
                print(f"| --metrics-cache-ttl=0s (in-flight sharing only) | {shared_uncached} |")
                print(f"| --metrics-cache-ttl=10m (a burst is the same under the default 250ms) | {shared_cached} |")
        if args.rss_series:
            print(
                "\n## Adapter resident memory after discovery (built-in rules + a catch-all rule over every series)\n"
            )
            pods = len(kube.objects["pods"])
            print(f"Baseline: {baseline_rss:.0f} MB with {sum(sizes):,} series and {pods:,} pods cached.\n")
            print(
                "| series in Prometheus | metric names | metrics discovered | items in one answer | RSS (MB) ", end=""
            )
            print("| peak RSS (MB) |")
            print("|---:|---:|---:|---:|---:|---:|")
            for series in (int(s) for s in args.rss_series.split(",")):
                print(await rss_row(series, kube, kubeconfig, work), flush=True)
    finally:
        await kube.stop()


if __name__ == "__main__":
    asyncio.run(main())
