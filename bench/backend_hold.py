"""A Prometheus outage, second by second: what the HPA's question and KEDA's GetMetrics are answered, with and
without ``--backend-failure-hold``.

A real Prometheus scrapes an exporter every second whose GPU value is the number of seconds since the run began (so a
held value shows as one that stops moving), the adapter runs as its own process (``python -m adapter``, plain HTTP,
KEDA's scaler on), and every second this script asks the custom metrics API what the HPA asks
(``pods/*/gpu_utilization?labelSelector=app=trainer`` in ``ml``) and KEDA's ``GetMetrics`` for the same pods. After
``--before`` seconds Prometheus is killed (SIGKILL), ``--down`` seconds later started again on the same port and data,
and the run goes on ``--after`` seconds. Each row: the HTTP status, trainer-0's value, its age (now minus the item's
timestamp, which a held answer keeps from Prometheus), and KEDA's answer or gRPC code.

    python -m bench.backend_hold [--holds 0s,30s] [--before 5] [--down 45] [--after 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import grpc

from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from harness.adapter.in_process import populate
from harness.kube.api import FakeKubeAPIServer
from harness.processes import free_port, server_process
from harness.stores.exporter import GPU, Exporter, exposition
from harness.stores.prometheus import Prometheus, run_prometheus

PATH = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization"
TIMEOUT = aiohttp.ClientTimeout(total=5)
TRIGGER = {"metricName": "gpu_utilization", "labelSelector": "app=trainer", "targetValue": "60"}


class Clock:
    """The exporter's value: whole seconds since the run began."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def text(self) -> str:
        labels = {"UUID": "GPU-b0", "gpu": "0", "Hostname": "node-a", "pod": "trainer-0", "namespace": "ml"}
        return exposition([(GPU, labels, str(int(time.monotonic() - self.started)))])


def age(stamp: str) -> float:
    return time.time() - datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def ask_http(session: aiohttp.ClientSession, base: str) -> tuple[str, str, str]:
    try:
        async with session.get(base + PATH, params={"labelSelector": "app=trainer"}, timeout=TIMEOUT) as resp:
            body = await resp.json()
    except (aiohttp.ClientError, TimeoutError) as e:
        return type(e).__name__, "", ""
    if resp.status != 200 or not body["items"]:
        return str(resp.status), "", ""
    item = body["items"][0]
    return "200", item["value"], f"{age(item['timestamp']):.0f}"


async def ask_keda(stub: pb_grpc.ExternalScalerStub) -> str:
    ref = pb.ScaledObjectRef(name="scaled", namespace="ml", scalerMetadata=TRIGGER)
    try:
        answer = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName="gpu_utilization"))
    except grpc.aio.AioRpcError as e:
        return e.code().name
    return f"{answer.metricValues[0].metricValueFloat:g}"


async def one_run(hold: str, args: argparse.Namespace, work: Path) -> list[str]:
    clock = Clock()
    kube = FakeKubeAPIServer()
    populate(kube)
    await kube.start()
    rows = [
        f"### `--backend-failure-hold={hold}`",
        "",
        "| t (s) | Prometheus | HTTP | value | age (s) | KEDA GetMetrics |",
        "|---:|---|---|---:|---:|---|",
    ]
    try:
        with contextlib.ExitStack() as stack:
            exporter = stack.enter_context(Exporter(clock.text))
            data = work / f"prometheus-{hold}"
            # in threads: the stand-in API server answers the adapter from this event loop
            prometheus: Prometheus = await asyncio.to_thread(
                stack.enter_context, run_prometheus(data, [exporter.target])
            )
            await asyncio.to_thread(prometheus.wait_for, GPU)
            port, keda = free_port(), free_port()
            base = f"http://127.0.0.1:{port}"
            command = [
                sys.executable, "-m", "adapter", f"--prometheus-url={prometheus.url}", "--insecure-serve-http",
                "--insecure-disable-auth", f"--secure-port={port}", "--bind-address=127.0.0.1",
                f"--lister-kubeconfig={kube.kubeconfig(work / 'kubeconfig')}", f"--backend-failure-hold={hold}",
                f"--keda-scaler-address=127.0.0.1:{keda}",
            ]  # fmt: skip
            adapter = server_process("the adapter", command, work / f"adapter-{hold}.log", f"{base}/readyz")
            await asyncio.to_thread(stack.enter_context, adapter)
            state = "up"
            async with aiohttp.ClientSession() as session, grpc.aio.insecure_channel(f"127.0.0.1:{keda}") as channel:
                stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
                restarted: asyncio.Future[Prometheus] | None = None
                start = time.monotonic()
                for t in range(args.before + args.down + args.after):
                    await asyncio.sleep(max(0.0, start + t - time.monotonic()))
                    if t == args.before:
                        prometheus.process.kill()
                        prometheus.process.wait()
                        state = "killed"
                    if t == args.before + args.down:
                        again = run_prometheus(data, [exporter.target], port=int(prometheus.url.rsplit(":", 1)[1]))
                        restarted = asyncio.ensure_future(asyncio.to_thread(stack.enter_context, again))
                        state = "starting"
                    if restarted is not None and restarted.done():
                        state, restarted = "up", None
                    status, value, seconds = await ask_http(session, base)
                    rows.append(f"| {t} | {state} | {status} | {value} | {seconds} | {await ask_keda(stub)} |")
                if restarted is not None:
                    await restarted
    finally:
        await kube.stop()
    return rows


async def runs(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="backend-hold-") as tmp:
        for hold in args.holds.split(","):
            print("\n".join(await one_run(hold, args, Path(tmp))) + "\n", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--holds", default="0s,30s", help="the runs' --backend-failure-hold values, comma-separated")
    parser.add_argument("--before", type=int, default=5, help="seconds before Prometheus is killed")
    parser.add_argument("--down", type=int, default=45, help="seconds Prometheus stays down")
    parser.add_argument("--after", type=int, default=10, help="seconds after it is started again")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(
        f"{datetime.date.today()}, commit {commit}, {platform.machine()} {platform.node()} with "
        f"{len(os.sched_getaffinity(0))} CPUs, Python {platform.python_version()}; Prometheus killed at "
        f"t={args.before} s and started again at t={args.before + args.down} s\n",
        flush=True,
    )
    asyncio.run(runs(args))


if __name__ == "__main__":
    main()
