"""An inference engine's signals and the GPU's utilization, from idle to overload, on one GPU.

The engine is ``gpuscale-load serve``'s (loadgen/serving/: a model of a continuously batching LLM engine, not an
engine), run in this process with its ``/metrics`` on 127.0.0.1, and the collector runs beside it on the same GPU
(``python -m collector``, which needs neither Kubernetes nor its client libraries without ``-k``). First the
capacity: the generated tokens per second with the engine's queue never empty and its batch full, in requests per
second of the mean output length. Then for each fraction of that capacity the engine runs with requests arriving at
that rate (a Poisson process, a fresh queue each time) for a warm-up and ``--seconds``, and once a second this script
reads:

- GPU utilization as the collector exports it: ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``;
- from the engine's ``/metrics``: ``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
  ``vllm:kv_cache_usage_perc``, the mean time to first token of the second (the deltas of
  ``vllm:time_to_first_token_seconds``'s sum and count), generated tokens per second, and the share of the second
  spent in steps (``gpuscale_serve_busy_seconds_total``).

The table has the mean and standard deviation of each column over the seconds read (TTFT over the seconds that had a
first token). ``--simulate`` needs no GPU, PyTorch nor collector: steps take ``serve --simulate``'s modelled time and
GPU utilization is the share of each second spent in steps.

``--prometheus BIN`` also runs the chain as deployed: a real Prometheus scraping the engine (labelled namespace
``llm``, pod ``engine-0``, as the shipped scrape job labels a pod) and the collector every second, and the adapter
(``python -m adapter``, its built-in rules) in front of it; once a second the same moments are read through the
custom and external metrics APIs as an HPA reads them: ``inference_requests_waiting``, ``_running``,
``inference_kv_cache_usage`` and ``inference_time_to_first_token_seconds`` of the pod, ``inference_demand`` of the
namespace and ``gpu_utilization`` of the node. The API's time to first token is its mean over the last minute, so
over a load's first seconds it still counts the previous load's requests.

    PYTHONPATH=. python -m bench.inference_load [--seconds 20] [--simulate] [--prometheus /usr/bin/prometheus]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from common import connections
from harness.kube.wire import parse_quantity
from harness.processes import free_port, server_process
from loadgen.serving.arrivals import Arrivals
from loadgen.serving.engine import Capacity, Engine, measure_capacity
from loadgen.serving.metrics import EngineMetrics
from loadgen.serving.rate_file import RateSchedule
from loadgen.serving.scheduler import Scheduler
from loadgen.serving.server import create_app
from loadgen.serving.settings import COST, HIDDEN, LAYERS, LIMITS, OUTPUT, PROMPT
from loadgen.serving.steps import MonotonicClock, SimulatedSteps, StepRunner
from loadgen.validate import read_gpu_series

ROOT = Path(__file__).resolve().parents[1]
FRACTIONS = (0.0, 0.05, 0.1, 0.25, 0.5, 0.8, 1.0, 1.3)
ENGINE_SERIES = {
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:kv_cache_usage_perc": "kv",
    "vllm:time_to_first_token_seconds_sum": "ttft_sum",
    "vllm:time_to_first_token_seconds_count": "ttft_count",
    "vllm:generation_tokens_total": "generated",
    "gpuscale_serve_busy_seconds_total": "busy",
}
COLUMNS = ("gpu_util", "engine_active", "busy", "waiting", "running", "kv", "ttft_ms", "tokens")
NAMESPACE, POD, NODE = "llm", "engine-0", "h200"
CM = "/apis/custom.metrics.k8s.io/v1beta2"
API_READS = {
    "api_waiting": f"{CM}/namespaces/{NAMESPACE}/pods/{POD}/inference_requests_waiting",
    "api_running": f"{CM}/namespaces/{NAMESPACE}/pods/{POD}/inference_requests_running",
    "api_kv": f"{CM}/namespaces/{NAMESPACE}/pods/{POD}/inference_kv_cache_usage",
    "api_ttft_ms": f"{CM}/namespaces/{NAMESPACE}/pods/{POD}/inference_time_to_first_token_seconds",
    "api_demand": f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/inference_demand",
    "api_gpu_util": f"{CM}/nodes/{NODE}/gpu_utilization",
}
API_COLUMNS = tuple(API_READS)


@contextlib.contextmanager
def collector(port: int, gpu: int, log: Path) -> Iterator[str]:
    """The collector on the real GPUs, serving on ``port``, once it reports GPU ``gpu``; stopped at the end."""
    url = f"http://127.0.0.1:{port}/metrics"
    with log.open("wb") as out:
        # the node's name labels its series (Hostname), as NODE_NAME does in the DaemonSet
        process = subprocess.Popen([sys.executable, "-m", "collector", "-a", f"127.0.0.1:{port}"], cwd=ROOT,
                                   stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "NODE_NAME": NODE})  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in _series(url, gpu):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the collector did not come up: {log.read_text()[-2000:]}")
                time.sleep(0.5)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=15)


@contextlib.contextmanager
def api_chain(prometheus: str, engine_port: int, collector_port: int | None, work: Path) -> Iterator[str]:
    """A real Prometheus scraping the engine and the collector every second, and the adapter reading it; the
    adapter's URL once both answer. Stopped at the end."""
    jobs: list[dict[str, object]] = [{
        "job_name": "gpuscale-inference-engines",
        "static_configs": [{"targets": [f"127.0.0.1:{engine_port}"],
                            "labels": {"namespace": NAMESPACE, "pod": POD, "node": NODE}}],
    }]  # fmt: skip
    if collector_port is not None:
        jobs.append({"job_name": "gpuscale-collector", "honor_labels": True,
                     "static_configs": [{"targets": [f"127.0.0.1:{collector_port}"]}]})  # fmt: skip
    config = work / "prometheus.yml"  # JSON is YAML
    config.write_text(json.dumps({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}))
    prometheus_port, adapter_port = free_port(), free_port()
    with contextlib.ExitStack() as stack:
        stack.enter_context(server_process(
            "Prometheus",
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{prometheus_port}"],
            work / "prometheus.log", f"http://127.0.0.1:{prometheus_port}/-/ready", within=60,
        ))  # fmt: skip
        _scraping(f"http://127.0.0.1:{prometheus_port}")
        adapter = f"http://127.0.0.1:{adapter_port}"
        stack.enter_context(server_process(
            "the adapter",
            [sys.executable, "-m", "adapter", "--insecure-serve-http", "--insecure-disable-auth",
             f"--secure-port={adapter_port}", f"--prometheus-url=http://127.0.0.1:{prometheus_port}"],
            work / "adapter.log", f"{adapter}/readyz", cwd=ROOT, within=60,
        ))  # fmt: skip
        yield adapter


def _scraping(prometheus: str, within: float = 60.0) -> None:
    """Wait for Prometheus's first scrape of the engine: it takes up new targets every 5 s, so the first load's first
    seconds would otherwise read nothing through the API."""
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode({"query": 'up{job="gpuscale-inference-engines"} == 1'})
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{prometheus}/api/v1/query?{query}", timeout=5) as resp:
            if json.load(resp)["data"]["result"]:
                return
        time.sleep(0.5)
    raise RuntimeError(f"Prometheus did not scrape the engine within {within:g} s")


async def read_api(session: aiohttp.ClientSession, adapter: str) -> dict[str, float]:
    """What the metrics APIs answer now for each of API_READS (NaN: no value)."""
    read: dict[str, float] = {}
    for key, path in API_READS.items():
        async with session.get(adapter + path) as resp:
            body = await resp.json() if resp.status == 200 else {"items": []}
        values = [float(parse_quantity(item["value"])) for item in body.get("items", [])]
        read[key] = sum(values) if values else math.nan
    read["api_ttft_ms"] *= 1000
    return read


def _series(url: str, gpu: int) -> dict[str, float]:
    try:
        return read_gpu_series(url, str(gpu), timeout=2)
    except OSError:
        return {}


async def read_engine(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url) as resp:
        text = await resp.text()
    return {
        ENGINE_SERIES[s.name]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in ENGINE_SERIES
    }


async def sample(
    session: aiohttp.ClientSession,
    engine_url: str,
    collector_url: str | None,
    gpu: int,
    warmup: float,
    seconds: int,
    adapter: str | None = None,
) -> list[dict[str, float]]:
    """One row per second of the ``seconds`` after ``warmup``: the engine's gauges at its end, its counters' and
    histogram's change over it, and the collector's readings."""
    start = time.monotonic()
    rows: list[dict[str, float]] = []
    last: dict[str, float] | None = None
    for k in range(seconds + 1):
        await asyncio.sleep(max(0.0, start + warmup - 1 + k - time.monotonic()))
        now = await read_engine(session, engine_url)
        now["t"] = time.monotonic()
        if last is not None:
            dt = now["t"] - last["t"]
            firsts = now["ttft_count"] - last["ttft_count"]
            row = {key: now[key] for key in ("waiting", "running")}
            row["kv"] = 100 * now["kv"]
            row["ttft_ms"] = 1000 * (now["ttft_sum"] - last["ttft_sum"]) / firsts if firsts else math.nan
            row["tokens"] = (now["generated"] - last["generated"]) / dt
            row["busy"] = 100 * (now["busy"] - last["busy"]) / dt
            if collector_url is None:
                row["gpu_util"], row["engine_active"] = row["busy"], math.nan
            else:
                gpu_series = await asyncio.to_thread(_series, collector_url, gpu)
                row["gpu_util"] = gpu_series.get("DCGM_FI_DEV_GPU_UTIL", math.nan)
                row["engine_active"] = gpu_series.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE", math.nan)
            if adapter is not None:
                row.update(await read_api(session, adapter))
            rows.append(row)
        last = now
    return rows


def cell(values: Sequence[float], digits: int = 1) -> str:
    kept = [v for v in values if not math.isnan(v)]
    if not kept:
        return "-"
    return f"{statistics.mean(kept):.{digits}f} ± {statistics.pstdev(kept):.{digits}f}"


def machine(simulate: bool) -> str:
    where = f"{platform.node()}, {platform.machine()}, Python {platform.python_version()}"
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
        gpus = subprocess.run(query, capture_output=True, text=True, check=False).stdout.strip().splitlines()
        where += "; " + "; ".join(f"GPU {i}: {g}" for i, g in enumerate(gpus))
    return where + ("; simulated steps (no GPU used)" if simulate else "")


def step_runner(args: argparse.Namespace) -> tuple[StepRunner, str]:
    if args.simulate:
        model = f"simulated steps of {1000 * COST.fixed:g} ms + {1000 * COST.per_token:g} ms per token"
        return SimulatedSteps(MonotonicClock(), COST), model
    from loadgen.serving.gpu_steps import GemmSteps

    runner = GemmSteps(HIDDEN, LAYERS, LIMITS.max_step_tokens, args.gpu)
    return runner, f"bf16 GEMM chain, hidden {HIDDEN}, {LAYERS} products per step, on {runner.name}"


async def run(args: argparse.Namespace) -> None:
    runner, model = step_runner(args)
    print(f"machine: {machine(args.simulate)}")
    with contextlib.ExitStack() as stack:
        collector_url: str | None = None
        collector_port: int | None = None
        if not args.simulate:
            log = Path(tempfile.mkdtemp(prefix="inference-load-")) / "collector.log"
            collector_port = free_port()
            collector_url = stack.enter_context(collector(collector_port, args.gpu, log))
        capacity = await asyncio.to_thread(measure_capacity, runner, LIMITS, PROMPT, OUTPUT, MonotonicClock())
        metrics = EngineMetrics("toy-batching-model")
        site_runner = connections.runner(create_app(metrics.registry), connections.Limits(), access_log=None)
        await site_runner.setup()
        port = free_port()
        await connections.listen(connections.BoundedSite(site_runner, "127.0.0.1", port), f"127.0.0.1:{port}")
        adapter = None
        if args.prometheus:
            work = Path(tempfile.mkdtemp(prefix="inference-load-api-"))
            # in a thread: the engine's page must be served on this loop meanwhile, for Prometheus's first scrape
            chain = api_chain(args.prometheus, port, collector_port, work)
            adapter = await asyncio.to_thread(stack.enter_context, chain)
        header(args, model, capacity, adapter is not None)
        stop = threading.Event()
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
                for fraction in args.fractions:
                    rate = fraction * capacity.requests_per_second
                    arrivals = Arrivals(RateSchedule.constant(rate), PROMPT, OUTPUT, seed=args.seed)
                    engine = Engine(Scheduler(LIMITS), runner, arrivals, metrics, MonotonicClock())
                    stop = threading.Event()
                    running = asyncio.create_task(asyncio.to_thread(engine.run, args.warmup + args.seconds + 1,
                                                                    stop.is_set))  # fmt: skip
                    rows = await sample(session, f"http://127.0.0.1:{port}/metrics", collector_url, args.gpu,
                                        args.warmup, args.seconds, adapter)  # fmt: skip
                    stop.set()
                    await running
                    columns = COLUMNS + (API_COLUMNS if adapter else ())
                    print(f"| {fraction:g} | {rate:.1f} | "
                          + " | ".join(cell([r[c] for r in rows], 3 if c == "engine_active" else 1) for c in columns)
                          + " |", flush=True)  # fmt: skip
        finally:
            stop.set()  # an interrupted run: the engine's thread ends after its step
            await site_runner.cleanup()


def header(args: argparse.Namespace, model: str, capacity: Capacity, api: bool) -> None:
    limits = LIMITS
    print(
        f"engine: {model}; max batch {limits.max_batch}, KV {limits.kv_tokens} tokens, at most "
        f"{limits.max_step_tokens} tokens a step; prompts {PROMPT} tokens, outputs {OUTPUT} tokens\n"
        f"capacity: {capacity.tokens_per_second:.0f} generated tokens/s with the batch full = "
        f"{capacity.requests_per_second:.1f} requests/s; each load read for {args.seconds} s after a {args.warmup:g} s "
        "warm-up, mean ± sd over the seconds\n"
    )
    gpu = "simulated: time in steps" if args.simulate else "DCGM_FI_DEV_GPU_UTIL"
    through = (" | API: waiting | API: running | API: KV cache % | API: TTFT ms (1-min mean) | API: inference_demand"
               " | API: gpu_utilization of the node") if api else ""  # fmt: skip
    print(f"| load (x capacity) | requests/s | GPU util % ({gpu}) | DCGM_FI_PROF_GR_ENGINE_ACTIVE | engine busy % | "
          f"waiting | running | KV cache % | TTFT ms | generated tokens/s{through} |")  # fmt: skip
    print("|---" * (10 + (len(API_COLUMNS) if api else 0)) + "|", flush=True)


def fractions(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(","))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=20, help="seconds read per load")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds run before reading, at each load")
    parser.add_argument("--fractions", type=fractions, default=FRACTIONS, help="loads as fractions of capacity")
    parser.add_argument("--simulate", action="store_true", help="no GPU: modelled steps, utilization from them")
    parser.add_argument("--gpu", type=int, default=0, help="CUDA device index (and the collector's gpu label)")
    parser.add_argument("--seed", type=int, default=0, help="seeds each load's arrivals")
    parser.add_argument(
        "--prometheus",
        metavar="BIN",
        default="",
        help="also read every second through a real Prometheus and the adapter (this binary)",
    )
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
