"""Scale benchmark and soak: a simulated large cluster (bench/scale_cluster.py) here, asked as 1,000 HPAs ask.

    python -m bench.scale_bench run  [--seconds 60] [--nodes 2000 --gpus-per-node 8 --pods 100000 --hpas 1000]
    python -m bench.scale_bench soak [--minutes 60] [--period 60] [--churn 1] [--csv FILE]

Both start a real Prometheus scraping the cluster's GPU series (the six fields the built-in rules read, for every
GPU, from 20 targets every 15 s) with manifests/prometheus/gpuscale-rules.yaml loaded, the API stand-in with the
cluster's pods in its own process, and adapters as subprocesses pinned to --adapter-cpu (everything else runs on
--other-cpu). Each HPA asks for its pods' gpu_utilization (wildcard pods, labelSelector app=hpa-NNNN) once every
--period seconds, the HPAs spread evenly over the period (open loop: a slow answer does not delay the next request).

``run`` measures, for the same load and one after the other, each alone on --adapter-cpu: the adapter with the
built-in rules (answers from the recorded series), the adapter with the raw-series rules only, and
prometheus-adapter's calls (bench/prometheus_adapter_pattern.py: a LIST and a query per request); then the adapter
with the built-in rules under KEDA's polling instead (bench/keda_polling.py: as many ScaledObjects as HPAs, asking
the same questions over gRPC, GetMetrics then IsActive every --keda-period seconds); then each PromQL those send,
timed by Prometheus itself (``stats=all``).
``soak`` runs the adapter for --minutes, replacing --churn CPU pods a second, and samples its resident memory every
10 s; with SCALE_BENCH_TRACEMALLOC=SECONDS a second adapter under the same load runs with tracemalloc
(bench/traced_adapter.py) and the growth between its first and last snapshots is printed by source line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Awaitable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]

from adapter.config.rules import default_rules_text  # noqa: E402
from bench.adapter_bench import machine, metric_value, percentile, rss_mb  # noqa: E402
from bench.keda_polling import POLLING_INTERVAL, Polls, poll  # noqa: E402
from bench.scale_cluster import Cluster, add_cluster_arguments, cluster_of  # noqa: E402
from harness.processes import free_port, launched, stop  # noqa: E402
from harness.stores.exporter import Exporter  # noqa: E402
from harness.stores.prometheus import Prometheus, run_prometheus  # noqa: E402

CM = "/apis/custom.metrics.k8s.io/v1beta2"
RULES = ROOT / "manifests" / "prometheus" / "gpuscale-rules.yaml"
TARGETS = 20
TICK = os.sysconf("SC_CLK_TCK")
T = TypeVar("T")


@dataclass
class Cpus:
    adapter: set[int]
    other: set[int]


def cpu_set(text: str) -> set[int]:
    """``1``, ``1,3`` or ``1-15``."""
    out: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        out |= set(range(int(first), int(last or first) + 1))
    return out


@contextmanager
def process(args: list[str], log: Path, cpus: set[int]) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(launched(args, cpus), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        stop(proc, within=30)


@contextmanager
def api_standin(cluster: Cluster, work: Path, churn: float, cpus: set[int]) -> Iterator[Path]:
    args = [sys.executable, "-m", "bench.scale_cluster", "serve", str(work), f"--churn={churn}"]
    args += [f"--nodes={cluster.nodes}", f"--gpus-per-node={cluster.gpus_per_node}", f"--pods={cluster.pods}"]
    args += [f"--hpas={cluster.hpas}", f"--namespaces={cluster.namespaces}"]
    with process(args, work / "api.log", cpus) as proc:
        deadline = time.monotonic() + 900
        while not (work / "kubeconfig").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the API stand-in did not start: {(work / 'api.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield work / "kubeconfig"


@contextmanager
def cluster_prometheus(cluster: Cluster, work: Path) -> Iterator[Prometheus]:
    per = math.ceil(cluster.nodes / TARGETS)
    with ExitStack() as stack:
        targets = [
            stack.enter_context(Exporter(cluster.exposition(first, min(per, cluster.nodes - first)).decode())).target
            for first in range(0, cluster.nodes, per)
        ]
        extra = {"rule_files": [str(RULES)], "global": {"scrape_interval": "15s", "evaluation_interval": "15s"}}
        prom = stack.enter_context(run_prometheus(work / "prom", targets, "15s", extra_config=extra))
        prom.wait_for(f"count(DCGM_FI_DEV_GPU_UTIL) >= {cluster.gpus}", timeout=300)
        prom.wait_for(f"count(namespace_pod:dcgm_gpu_utilization:avg) >= {cluster.gpus}", timeout=120)
        yield prom


def adapter_args(prom: Prometheus, kubeconfig: Path, port: int, *extra: str) -> list[str]:
    return [
        f"--prometheus-url={prom.url}",
        f"--lister-kubeconfig={kubeconfig}",
        "--insecure-serve-http",
        "--insecure-disable-auth",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--prometheus-timeout=60s",
        *extra,
    ]


def raw_rules(path: Path) -> Path:
    """The built-in rules without those over recorded series: every answer from the raw GPU series."""
    config = yaml.safe_load(default_rules_text())
    config["rules"] = [r for r in config["rules"] if ":" not in r["seriesQuery"].split("{")[0]]
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def prometheus_counters(session: aiohttp.ClientSession, prom: Prometheus) -> dict[str, float]:
    async with session.get(f"{prom.url}/metrics") as resp:
        text = await resp.text()
    out = {"queries": 0.0, "cpu": 0.0, "recording": 0.0}
    for line in text.splitlines():
        if line.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query"' in line:
            out["queries"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("process_cpu_seconds_total "):
            out["cpu"] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("prometheus_rule_group_last_duration_seconds{") and "gpuscale.recording" in line:
            out["recording"] = float(line.rsplit(" ", 1)[1])
    return out


async def over_50ms(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    """From the adapter's own histograms: how many wildcard answers and how many Prometheus queries so far took
    over 50 ms."""
    async with session.get(f"{url}/metrics") as resp:
        text = await resp.text()
    found: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        for key, name, labels in (
            ("request", "gpuscale_adapter_request_duration_seconds_bucket{", 'route="custom_wildcard"'),
            ("query", "gpuscale_adapter_prometheus_request_duration_seconds_bucket{", 'endpoint="query"'),
        ):
            if line.startswith(name) and labels in line:
                for le in ("0.05", "+Inf"):
                    if f'le="{le}"' in line:
                        found[(key, le)] = found.get((key, le), 0.0) + float(line.rsplit(" ", 1)[1])
    return (
        found.get(("request", "+Inf"), 0.0) - found.get(("request", "0.05"), 0.0),
        found.get(("query", "+Inf"), 0.0) - found.get(("query", "0.05"), 0.0),
    )


def hpa_path(cluster: Cluster, hpa: int) -> str:
    return f"{CM}/namespaces/{cluster.namespace(hpa)}/pods/%2A/gpu_utilization?labelSelector=app%3D{cluster.app(hpa)}"


@dataclass
class Load:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    short: int = 0  # answers without an item for every pod of the HPA


async def drive(bases: list[str], cluster: Cluster, seconds: float, period: float) -> Load:
    """Each HPA asks once a period, the HPAs evenly spread; requests leave on schedule whatever the answers do.
    Only the first base's answers are measured (the others, if any, get the same load); each base has its own
    connections, so a slow one cannot hold up the measured one."""
    load = Load()
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    async def one(hpa: int, base: str, measured: bool) -> None:
        started = time.perf_counter()
        try:
            async with sessions[base].get(base + hpa_path(cluster, hpa)) as resp:
                body = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError):
            status = 0
            body = b""
        if measured:
            load.latencies.append(time.perf_counter() - started)
            load.statuses[status] += 1
            if status == 200 and body.count(b'"describedObject"') != cluster.pods_per_hpa(hpa):
                load.short += 1

    timeout = aiohttp.ClientTimeout(total=60)
    sessions = {b: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256), timeout=timeout) for b in bases}
    start = loop.time() + 0.2
    for i in itertools_count():
        at = start + i * period / cluster.hpas
        if at - start >= seconds:
            break
        await asyncio.sleep(max(0.0, at - loop.time()))
        for b, base in enumerate(bases):
            task = asyncio.create_task(one(i % cluster.hpas, base, b == 0))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    for session in sessions.values():
        await session.close()
    return load


def itertools_count() -> Iterator[int]:
    i = 0
    while True:
        yield i
        i += 1


def lists_served(work: Path) -> int:
    try:
        return int(json.loads((work / "lists").read_text())["lists"])
    except (OSError, ValueError, KeyError):
        return 0


async def wait_ready(session: aiohttp.ClientSession, url: str) -> None:
    """adapter_bench's readiness (pods cached, a relist done), with room for 100,000 pods listed on a busy core."""
    deadline = time.monotonic() + 900
    while True:
        try:
            synced = await metric_value(session, url, "gpuscale_adapter_kube_cache_synced", 'resource="pods"')
            relisted = await metric_value(session, url, "gpuscale_adapter_discovery_runs_total", 'result="success"')
            if synced == 1 and relisted >= 1:
                return
        except aiohttp.ClientError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} was not ready after 900 s")
        await asyncio.sleep(1)


async def answered(session: aiohttp.ClientSession, url: str, cluster: Cluster) -> None:
    """Wait until the recorded-series rule is discovered (a relist after the recording rules' first evaluation)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        async with session.get(f"{url}/explain{hpa_path(cluster, 0)}") as resp:
            report = await resp.json()
        if resp.status == 200 and len(report["answer"]["items"]) == cluster.pods_per_hpa(0):
            return
        await asyncio.sleep(2)
    raise RuntimeError(f"{url} never answered HPA 0 in full")


async def wait_listening(session: aiohttp.ClientSession, url: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            async with session.get(f"{url}/healthz"):
                return
        except aiohttp.ClientConnectionError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} was not listening after 120 s") from None
            await asyncio.sleep(0.5)


@dataclass(frozen=True)
class Spent:
    """What a server, Prometheus and the API stand-in did over one row."""

    seconds: float
    cpu: float  # the server's CPU seconds
    rss: float
    peak: float
    queries: float  # Prometheus's /api/v1/query requests
    prometheus_cpu: float
    lists: int  # LISTs the API stand-in served


async def spent(
    session: aiohttp.ClientSession, proc: subprocess.Popen[bytes], prom: Prometheus, work: Path, load: Awaitable[T]
) -> tuple[T, Spent]:
    """``load``'s result, and what it cost."""
    cpu0, prom0, lists0 = cpu_seconds(proc.pid), await prometheus_counters(session, prom), lists_served(work)
    started = time.monotonic()
    result = await load
    elapsed = time.monotonic() - started
    await asyncio.sleep(1.5)  # the stand-in writes its LIST count once a second
    cpu1, prom1, lists1 = cpu_seconds(proc.pid), await prometheus_counters(session, prom), lists_served(work)
    rss, peak = rss_mb(proc.pid)
    queries, prometheus_cpu = prom1["queries"] - prom0["queries"], prom1["cpu"] - prom0["cpu"]
    return result, Spent(elapsed, cpu1 - cpu0, rss, peak, queries, prometheus_cpu, lists1 - lists0)


async def measure(
    session: aiohttp.ClientSession,
    name: str,
    proc: subprocess.Popen[bytes],
    url: str,
    prom: Prometheus,
    work: Path,
    cluster: Cluster,
    args: argparse.Namespace,
    gpuscale: bool,
) -> tuple[str, str, Load, Spent]:
    """One server's row of each table: the load for --seconds after one unmeasured period (every HPA's objects and
    queries seen once); ``gpuscale``: the adapter's own histograms are there to read."""
    await drive([url], cluster, args.period, args.period)
    slow0 = await over_50ms(session, url) if gpuscale else (0.0, 0.0)
    load, cost = await spent(session, proc, prom, work, drive([url], cluster, args.seconds, args.period))
    n = len(load.latencies)
    slow1 = await over_50ms(session, url) if gpuscale else (0.0, 0.0)
    slow = sum(1 for t in load.latencies if t > 0.05)
    tail = f"| {name} | {slow} | " + (
        f"{slow1[0] - slow0[0]:.0f} | {slow1[1] - slow0[1]:.0f} |" if gpuscale else "- | - |"
    )
    row = (
        f"| {name} | {n} | {ms(percentile(load.latencies, 50))} | {ms(percentile(load.latencies, 99))} "
        f"| {1000 * cost.cpu / n:.2f} | {cost.rss:.0f} ({cost.peak:.0f}) "
        f"| {cost.queries / cost.seconds:.1f} "
        f"| {cost.queries / n:.2f} "
        f"| {cost.lists / cost.seconds:.1f} "
        f"| {1000 * cost.prometheus_cpu / n:.2f} "
        f"| {dict(sorted(load.statuses.items()))} | {load.short} |"
    )
    return row, tail, load, cost


async def measure_polling(
    session: aiohttp.ClientSession,
    proc: subprocess.Popen[bytes],
    address: str,
    prom: Prometheus,
    work: Path,
    cluster: Cluster,
    args: argparse.Namespace,
) -> tuple[Polls, Spent]:
    """KEDA's polling for --seconds after one unmeasured polling interval."""
    await poll(address, cluster, args.keda_period, args.keda_period)
    return await spent(session, proc, prom, work, poll(address, cluster, args.seconds, args.keda_period))


def _load_row(
    what: str,
    latencies: list[float],
    cost: Spent,
    questions: int,
    statuses: dict[int, int] | dict[str, int],
    wrong: int,
) -> str:
    n = len(latencies)
    return (
        f"| {what} | {n} | {n / cost.seconds:.1f} | {ms(percentile(latencies, 50))} "
        f"| {ms(percentile(latencies, 99))} | {1000 * cost.cpu / n:.2f} | {100 * cost.cpu / cost.seconds:.1f} "
        f"| {cost.rss:.0f} ({cost.peak:.0f}) | {cost.queries / questions:.2f} | {cost.lists / cost.seconds:.1f} "
        f"| {statuses} | {wrong} |"
    )


def polling_table(
    http: tuple[Load, Spent], keda: tuple[Polls, Spent], cluster: Cluster, args: argparse.Namespace
) -> str:
    """The HPAs' HTTP requests and KEDA's polling of the same adapter, side by side, and their ratios. A question is
    an HPA's request or a ScaledObject's poll (GetMetrics, then IsActive: one value asked twice)."""
    (load, http_cost), (polls, keda_cost) = http, keda
    rows = [
        "| load on the adapter (built-in rules) | calls | calls/s | p50 (ms) | p99 (ms) "
        "| adapter CPU per call (ms) | adapter CPU (% of a core) | RSS (peak) MB | Prometheus queries per question "
        "| API LISTs/s | statuses | wrong answers |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
        _load_row(
            f"{cluster.hpas:,} HPAs: HTTP GET every {args.period:g} s",
            load.latencies,
            http_cost,
            len(load.latencies),
            dict(sorted(load.statuses.items())),
            load.short,
        ),
        _load_row(
            f"{cluster.hpas:,} ScaledObjects: gRPC GetMetrics + IsActive every {args.keda_period:g} s",
            polls.all,
            keda_cost,
            len(polls.latencies["GetMetrics"]),
            dict(sorted(polls.codes.items())),
            polls.wrong,
        ),
    ]
    by_method = ", ".join(
        f"{method} p50 {ms(percentile(times, 50))} ms, p99 {ms(percentile(times, 99))} ms"
        for method, times in polls.latencies.items()
    )
    http_call, keda_call = http_cost.cpu / len(load.latencies), keda_cost.cpu / len(polls.all)
    rows.append(
        f"\nKEDA's calls by method: {by_method}.\n\n"
        f"A gRPC call against an HTTP request: p50 {percentile(polls.all, 50) / percentile(load.latencies, 50):.2f}x, "
        f"p99 {percentile(polls.all, 99) / percentile(load.latencies, 99):.2f}x, adapter CPU "
        f"{keda_call / http_call:.2f}x. A ScaledObject's poll (two calls) against an HPA's request: adapter CPU "
        f"{2 * keda_call / http_call:.2f}x; the whole load, {100 * keda_cost.cpu / keda_cost.seconds:.1f} % of a "
        f"core against {100 * http_cost.cpu / http_cost.seconds:.1f} %."
    )
    return "\n".join(rows)


async def promql_of(session: aiohttp.ClientSession, url: str, cluster: Cluster, hpa: int) -> str:
    return await explained(session, url, hpa_path(cluster, hpa))


async def explained(session: aiohttp.ClientSession, url: str, path: str) -> str:
    """The first PromQL the adapter sends for ``path``."""
    async with session.get(f"{url}/explain{path}") as resp:
        report = await resp.json()
    return str(report["queries"][0]["promql"])


async def prometheus_times(session: aiohttp.ClientSession, prom: Prometheus, queries: list[str]) -> list[float]:
    """Each query's evaluation time as Prometheus reports it (stats=all), three times each."""
    out = []
    for _ in range(3):
        for q in queries:
            async with session.post(f"{prom.url}/api/v1/query", data={"query": q, "stats": "all"}) as resp:
                body = await resp.json()
            out.append(float(body["data"]["stats"]["timings"]["evalTotalTime"]))
    return out


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


async def run(args: argparse.Namespace) -> None:
    cluster, cpus = cluster_of(args), Cpus(args.adapter_cpu, args.other_cpu)
    os.sched_setaffinity(0, cpus.other)
    work = Path(tempfile.mkdtemp(prefix="scale-bench-", dir=args.workdir))
    print(f"Machine: {machine()}\n")
    began = time.monotonic()
    with ExitStack() as stack:
        kubeconfig = stack.enter_context(api_standin(cluster, work, 0.0, cpus.other))
        prom = stack.enter_context(cluster_prometheus(cluster, work))
        raw_config = raw_rules(work / "raw-rules.yaml")
        adapter = [sys.executable, "-m", "adapter"]
        pattern = [sys.executable, "-m", "bench.prometheus_adapter_pattern", prom.url, str(kubeconfig)]
        # the first adapter serves KEDA's external scaler too: its polling is measured after its HTTP row, by the same
        # process in the same state, so that the two loads' figures compare
        keda_address = f"127.0.0.1:{free_port()}"
        servers = {
            "gpuscale adapter, built-in rules (recorded series)": (
                adapter,
                [f"--keda-scaler-address={keda_address}"],
                "recorded",
            ),
            "gpuscale adapter, raw-series rules only": (adapter, [f"--config={raw_config}"], "raw"),
            "prometheus-adapter's calls (LIST + query per request)": (pattern, None, "pattern"),
        }
        print(
            f"Cluster: {cluster.nodes:,} nodes x {cluster.gpus_per_node} GPUs = {cluster.gpus:,} GPUs, "
            f"{len(FIELDS_READ)} series per GPU scraped ({cluster.gpus * len(FIELDS_READ):,} series), "
            f"{cluster.pods:,} pods, {cluster.hpas:,} HPAs each asking every {args.period:g} s "
            f"({cluster.hpas / args.period:.1f} requests/s), {args.seconds:g} s per row; each server alone on "
            f"CPU {','.join(map(str, sorted(cpus.adapter)))}; then {cluster.hpas:,} ScaledObjects polling the first "
            f"adapter every {args.keda_period:g} s ({2 * cluster.hpas / args.keda_period:.1f} calls/s)\n"
        )
        sample = list(range(0, cluster.hpas, max(1, cluster.hpas // 100)))
        ns_paths = [f"{CM}/namespaces/team-{n:03d}/metrics/gpu_utilization" for n in range(cluster.namespaces)]
        rows: list[str] = []
        tails: list[str] = []
        promql: dict[str, tuple[list[str], list[str]]] = {}
        compared = ""
        connector = aiohttp.TCPConnector(limit=256)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
            # one server at a time, as each runs in production on CPU of its own: a second adapter relisting on
            # the same CPU would put its relists into the measured one's tail
            for name, (command, extra, log) in servers.items():
                port = free_port()
                url = f"http://127.0.0.1:{port}"
                gpuscale = extra is not None
                args_of = adapter_args(prom, kubeconfig, port, *extra) if extra is not None else [str(port)]
                with process(command + args_of, work / f"{log}.log", cpus.adapter) as proc:
                    if gpuscale:
                        await wait_ready(session, url)
                        await answered(session, url, cluster)
                    else:
                        await wait_listening(session, url)
                    print(f"{name}: ready {time.monotonic() - began:.0f} s after the start", flush=True)
                    row, tail, load, cost = await measure(session, name, proc, url, prom, work, cluster, args, gpuscale)
                    rows.append(row)
                    tails.append(tail)
                    if log == "recorded":
                        polled = await measure_polling(session, proc, keda_address, prom, work, cluster, args)
                        compared = polling_table((load, cost), polled, cluster, args)
                    if gpuscale:
                        promql[log] = (
                            [await promql_of(session, url, cluster, j) for j in sample],
                            [await explained(session, url, p) for p in ns_paths],
                        )
            print("\n## HPA requests (wildcard pods with a labelSelector over the HPA's pods)\n")
            print(
                "| server | requests | p50 (ms) | p99 (ms) | server CPU per request (ms) | RSS (peak) MB "
                "| Prometheus queries/s | queries per request | API LISTs/s "
                "| Prometheus CPU in the row per request (ms, scrapes and rules included) "
                "| statuses | answers missing pods |"
            )
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
            print("\n".join(rows))

            print(
                "\n## Requests over 50 ms: seen by the client, timed by the adapter, and the adapter's Prometheus "
                "queries over 50 ms\n"
            )
            print("| server | client: over 50 ms | adapter: answers over 50 ms | adapter: queries over 50 ms |")
            print("|---|---:|---:|---:|")
            print("\n".join(tails))

            print(
                f"\n## KEDA's polling: {cluster.hpas:,} ScaledObjects asking the HPAs' questions over gRPC, against "
                "the HPAs' requests, one after the other on the first adapter\n"
            )
            print(compared)

            (recorded, ns_recorded), (raw, ns_raw) = promql["recorded"], promql["raw"]
            timed = [
                ("HPA's pods, recorded series", recorded, await prometheus_times(session, prom, recorded)),
                ("HPA's pods, raw series", raw, await prometheus_times(session, prom, raw)),
                ("namespace object, recorded series", ns_recorded, await prometheus_times(session, prom, ns_recorded)),
                ("namespace object, raw series", ns_raw, await prometheus_times(session, prom, ns_raw)),
            ]
            counters = await prometheus_counters(session, prom)
            print(
                "\n## One request's query, evaluated by Prometheus (stats=all evalTotalTime), "
                f"{len(sample)} HPAs and {cluster.namespaces} namespaces, 3 times each\n"
            )
            print("| request, rule | p50 (ms) | p99 (ms) | example |\n|---|---:|---:|---|")
            for what, queries, times in timed:
                print(f"| {what} | {ms(percentile(times, 50))} | {ms(percentile(times, 99))} | `{queries[0][:150]}` |")
            print(
                f"\nRecording rule group gpuscale.recording, last evaluation: {ms(counters['recording'])} ms "
                f"every 15 s ({100 * counters['recording'] / 15:.1f} % of one core)."
            )
    print(f"\nTotal wall time: {time.monotonic() - began:.0f} s; work directory {work}")


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, in MB per minute."""
    ts = [t for t, _ in points]
    ys = [y for _, y in points]
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    return 60 * sum((t - mt) * (y - my) for t, y in points) / sum((t - mt) ** 2 for t in ts)


async def soak(args: argparse.Namespace) -> None:
    cluster, cpus = cluster_of(args), Cpus(args.adapter_cpu, args.other_cpu)
    os.sched_setaffinity(0, cpus.other)
    work = Path(tempfile.mkdtemp(prefix="scale-soak-", dir=args.workdir))
    traced_every = os.environ.get("SCALE_BENCH_TRACEMALLOC")
    print(f"Machine: {machine()}\n", flush=True)
    samples: list[tuple[float, float, float]] = []
    with ExitStack() as stack:
        kubeconfig = stack.enter_context(api_standin(cluster, work, args.churn, cpus.other))
        prom = stack.enter_context(cluster_prometheus(cluster, work))
        ports = [free_port(), free_port()]
        plain = stack.enter_context(
            process(
                [sys.executable, "-m", "adapter", *adapter_args(prom, kubeconfig, ports[0])],
                work / "adapter.log",
                cpus.adapter,
            )
        )
        urls = [f"http://127.0.0.1:{ports[0]}"]
        traced = None
        if traced_every:
            traced = stack.enter_context(
                process(
                    [
                        sys.executable,
                        "-m",
                        "bench.traced_adapter",
                        str(work / "snapshots"),
                        traced_every,
                        *adapter_args(prom, kubeconfig, ports[1]),
                    ],
                    work / "traced.log",
                    cpus.adapter,
                )
            )
            urls.append(f"http://127.0.0.1:{ports[1]}")
        connector = aiohttp.TCPConnector(limit=256)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
            for url in urls:
                await wait_ready(session, url)
                await answered(session, url, cluster)
            start = time.monotonic()

            async def sample() -> None:
                while True:
                    t = time.monotonic() - start
                    samples.append((t, rss_mb(plain.pid)[0], rss_mb(traced.pid)[0] if traced else float("nan")))
                    await asyncio.sleep(10 - (time.monotonic() - start) % 10)

            sampler = asyncio.create_task(sample())
            cpu0 = cpu_seconds(plain.pid)
            load = await drive(urls, cluster, args.minutes * 60, args.period)
            cpu = cpu_seconds(plain.pid) - cpu0
            sampler.cancel()
            lines = [
                f"{args.minutes:g} min: {cluster.pods:,} pods ({args.churn:g} replaced a second), "
                f"{cluster.gpus:,} GPUs, {cluster.hpas:,} HPAs each asking every {args.period:g} s "
                f"({cluster.hpas / args.period:.1f} requests/s); {len(load.latencies)} requests, statuses "
                f"{dict(load.statuses)}, answers missing pods {load.short}; p50 {ms(percentile(load.latencies, 50))} "
                f"ms, p99 {ms(percentile(load.latencies, 99))} ms; adapter CPU {1000 * cpu / len(load.latencies):.2f}"
                f" ms per request\n",
            ]
            half = args.minutes * 30
            last = [(t, a) for t, a, _ in samples if t >= half]
            first = [(t, a) for t, a, _ in samples if 60 <= t < half]
            lines.append(
                f"RSS slope, least squares: last {args.minutes / 2:g} min **{slope(last):+.4f} MB/min** "
                f"(first {args.minutes / 2:g} min after the first minute: {slope(first):+.4f} MB/min); "
                f"RSS {samples[0][1]:.1f} MB at start, {samples[-1][1]:.1f} MB at the end\n"
            )
            lines.append("| t (min) | adapter RSS (MB) |" + (" traced adapter RSS (MB) |" if traced else ""))
            lines.append("|---:|---:|" + ("---:|" if traced else ""))
            for t, a, b in samples[::6]:
                lines.append(f"| {t / 60:.0f} | {a:.1f} |" + (f" {b:.1f} |" if traced else ""))
            if args.csv:
                csv = "seconds,adapter_rss_mb\n" + "".join(f"{t:.0f},{a:.2f}\n" for t, a, _ in samples)
                Path(args.csv).write_text(csv)  # noqa: ASYNC240 (once, after the load)
            if traced:
                lines += snapshot_diff(work / "snapshots")
            print("\n".join(lines), flush=True)


def snapshot_diff(directory: Path) -> list[str]:
    snaps = sorted(directory.glob("snap-*.pickle"))
    if len(snaps) < 2:
        return [f"\n{len(snaps)} tracemalloc snapshot(s): nothing to compare"]
    first, last = tracemalloc.Snapshot.load(str(snaps[0])), tracemalloc.Snapshot.load(str(snaps[-1]))
    out = [f"\n## tracemalloc: growth from {snaps[0].name} to {snaps[-1].name}, by source line\n"]
    out.append("| size diff (KiB) | count diff | where |\n|---:|---:|---|")
    for stat in last.compare_to(first, "lineno")[:20]:
        frame = stat.traceback[0]
        out.append(f"| {stat.size_diff / 1024:+.1f} | {stat.count_diff:+d} | {frame.filename}:{frame.lineno} |")
    total = sum(s.size for s in last.statistics("filename")) - sum(s.size for s in first.statistics("filename"))
    out.append(f"\ntraced total: {total / 1024 / 1024:+.2f} MiB")
    return out


FIELDS_READ = ("GPU_UTIL", "FB_USED", "PIPE_TENSOR_ACTIVE", "GR_ENGINE_ACTIVE", "SM_ACTIVE", "DRAM_ACTIVE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seconds", type=float, default=60.0)
    r.add_argument("--period", type=float, default=15.0)
    r.add_argument("--keda-period", type=float, default=POLLING_INTERVAL, help="KEDA's pollingInterval (s)")
    s = sub.add_parser("soak")
    s.add_argument("--minutes", type=float, default=60.0)
    s.add_argument("--period", type=float, default=60.0)
    s.add_argument("--churn", type=float, default=1.0)
    s.add_argument("--csv", default="")
    for p in (r, s):
        add_cluster_arguments(p)
        p.add_argument("--adapter-cpu", type=cpu_set, default={0}, help="CPUs of the adapters: 0, 0,1 or 0-3")
        p.add_argument("--other-cpu", type=cpu_set, default={1}, help="CPUs of everything else (Prometheus too)")
        p.add_argument("--workdir", default=str(ROOT / "scratch"))
    args = parser.parse_args()
    asyncio.run(run(args) if args.command == "run" else soak(args))


if __name__ == "__main__":
    main()
