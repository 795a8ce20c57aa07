"""``gpuscale-demo`` (``make run``): a GPU load becomes an autoscaling decision, live, on this machine.

It starts the whole chain (demo/stack.py): the collector, on this machine's GPUs or on simulated GPUs whose load
follows a script, a real Prometheus, the adapter, and stand-ins for the Kubernetes API and the kubelet that give it
a Deployment ``trainer`` of three pods, each on its own GPU, and two ``infer`` pods sharing one GPU. Every few
seconds it prints, per pod, the ``gpu_utilization`` the custom metrics API returns (what an HPA reads) and the
replica count an HPA with a 70 % target would choose. It ends by itself and stops everything it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from collector.simulated import SimulatedNvml
from demo.hpa import desired_replicas
from demo.proc_tree import ProcTree, v2_systemd
from demo.stack import Pod, Stack

TRAINERS = ("trainer-0", "trainer-1", "trainer-2")
INFER = ("infer-a", "infer-b")
INFER_PIDS = {"infer-a": 4101, "infer-b": 4102}
SPEC = {
    "gpus": 4,
    "processes": {3: {4101: 0.55, 4102: 0.2}},
    # the trainers idle, then a burst of work arrives at 15-30 s, stays until 55 s and falls back
    "load": {
        0: [[0, 0.15], [15, 0.15], [30, 0.97], [55, 0.97], [65, 0.3]],
        1: [[0, 0.2], [15, 0.2], [30, 0.92], [55, 0.92], [65, 0.25]],
        2: [[0, 0.1], [15, 0.1], [30, 0.95], [55, 0.95], [65, 0.2]],
    },
    # work arrives in bursts, busy for load x 0.25 s of every 0.25 s, as real serving does: a point sample of such a
    # GPU jumps between 0 and 100, the collector's mean over each second is the load itself
    "period": 0.25,
}


def has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:  # no driver, no library: simulate
        return False


def simulated_setup(workdir: Path) -> tuple[list[str], list[Pod]]:
    spec = workdir / "simulation.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    uuids = SimulatedNvml(4).uuids()
    proc = ProcTree(workdir / "proc")
    pods = [Pod(name, {"app": "trainer"}, (uuids[i],)) for i, name in enumerate(TRAINERS)]
    for name in INFER:
        uid = f"00000000-0000-4000-8000-00000000{INFER_PIDS[name]:04d}"
        proc.add(INFER_PIDS[name], v2_systemd(uid))
        replica = f"{uuids[3]}::{INFER.index(name)}"
        pods.append(Pod(name, {"app": "infer"}, (replica,), resource="nvidia.com/gpu.shared", uid=uid))
    args = ["--simulate-spec", str(spec), "--proc-root", str(proc.root), "--shared-window", "5000"]
    return args, pods


def real_setup() -> tuple[list[str], list[Pod]]:
    import pynvml

    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    pynvml.nvmlShutdown()
    pods = [Pod(name, {"app": "trainer"}, (uuids[i],)) for i, name in enumerate(TRAINERS[:count])]
    return [], pods


async def real_load(stop: asyncio.Event) -> None:
    """On real GPUs the demo makes the burst itself: a bf16 GEMM on GPU 0 at 95 %, then at 30 % duty."""
    for delay, duty, seconds in ((15, 0.95, 40), (0, 0.3, 20)):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        if stop.is_set():
            return
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "loadgen", "run", "--kind", "gemm-bf16", "--duty", str(duty),
            "--seconds", str(seconds), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        waiter = asyncio.create_task(process.wait())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if process.returncode is None:
            process.terminate()
            await process.wait()


def line(t: float, trainers: dict[str, float], infer: dict[str, float], replicas: int, target: float) -> str:
    cells = " ".join(f"{trainers[p]:9.1f}" if p in trainers else f"{'-':>9}" for p in TRAINERS)
    average = f"{sum(trainers.values()) / len(trainers):7.1f}" if trainers else f"{'-':>7}"
    desired = desired_replicas(replicas, trainers.values(), target)
    shared = " ".join(f"{infer[p]:8.1f}" if p in infer else f"{'-':>8}" for p in INFER)
    return f"{t:5.0f}s {cells} | {average} {desired:4d} (of {replicas}) | {shared}"


async def run(seconds: float, target: float, simulate: bool) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="gpuscale-demo-"))
    collector_args, pods = simulated_setup(workdir) if simulate else real_setup()
    kind = "simulated H200s (load follows a script)" if simulate else "this machine's GPUs"
    print(f"starting the chain on {kind}: collector, Prometheus, adapter, Kubernetes stand-ins ({workdir})")
    async with Stack(workdir, collector_args=collector_args) as stack:
        stack.set_pods(pods)
        trainers_running = sum(1 for p in pods if p.name in TRAINERS)
        print(
            f"custom metrics API: {stack.adapter_url}/apis/custom.metrics.k8s.io/v1beta2 ; Prometheus: "
            f"{stack.prometheus.url if stack.prometheus else ''} ; collector: {stack.collector_url}/metrics\n"
        )
        print(
            "gpu_utilization (%) per pod, as the custom metrics API answers the HPA; desired = the HPA's replicas "
            f"for a {target:.0f} % target (tolerance 0.1)\n"
        )
        print(f"{'t':>6} " + " ".join(f"{p:>9}" for p in TRAINERS) + " | average desired      | "
              + " ".join(f"{p:>8}" for p in INFER) + " (one shared GPU)")  # fmt: skip
        stop = asyncio.Event()
        load = asyncio.create_task(real_load(stop)) if not simulate else None
        started = time.monotonic()
        try:
            while (elapsed := time.monotonic() - started) < seconds:
                trainers = await stack.pod_metric("gpu_utilization", "app=trainer")
                infer = await stack.pod_metric("gpu_utilization", "app=infer")
                print(line(elapsed, trainers, infer, trainers_running, target), flush=True)
                await asyncio.sleep(3)
        finally:
            stop.set()
            if load is not None:
                await load
    print("\ndone: every process the demo started has stopped")


def main() -> None:
    parser = argparse.ArgumentParser(prog="gpuscale-demo", description=__doc__)
    parser.add_argument("--seconds", type=float, default=75.0, help="how long to run (default 75)")
    parser.add_argument("--target", type=float, default=70.0, help="the HPA's gpu_utilization target (default 70)")
    parser.add_argument("--simulate", action="store_true", help="simulated GPUs even when this machine has GPUs")
    args = parser.parse_args()
    simulate = args.simulate or not has_gpu()
    try:
        asyncio.run(run(args.seconds, args.target, simulate))
    except KeyboardInterrupt:
        print("\nstopped")


if __name__ == "__main__":
    main()
