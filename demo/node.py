"""The node the demo runs on: simulated H200s, or this machine's free GPUs, and what makes them busy.

``simulated_node``: ten simulated H200s, six free for the trainer's replicas (their load comes from the collector's
load file), one shared by two ``infer`` pods at 0.55 and 0.2 of its time, and three for the chat engines' replicas
(busy while their engine is in a step, through the same load file). ``real_node``: the GPUs that no process uses, at
most ``MAX_REPLICAS``, each with a ``gpuscale-load`` worker (demo/gpu_work.py); the chat engines are simulated
there and hold no GPU.
``simulated_setup``: the same simulated node without the chat engines' GPUs and with three fixed ``trainer`` pods
instead of a Deployment, for what needs a node to scrape but no loop (the dashboard tests, the adapter's load
benchmark).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from collector.nvml.api import Nvml
from collector.nvml.device import text
from collector.simulation.nvml import SimulatedNvml
from demo.deployment import Gpu
from demo.gpu_work import GpuWork
from demo.stack import Pod
from demo.workload import SimulatedWork, Work
from harness.node.proc_tree import ProcTree, v2_systemd

MAX_REPLICAS = 6
CHAT_REPLICAS = 3
INFER = ("infer-a", "infer-b")
INFER_PIDS = {"infer-a": 4101, "infer-b": 4102}
TRAINERS = ("trainer-0", "trainer-1", "trainer-2")  # simulated_setup's fixed pods
LOAD_FILE = "gpu-loads.yaml"  # in the work directory, beside the simulation spec that names it


@dataclass
class Node:
    collector_args: list[str]
    gpus: list[Gpu]  # free for the trainer's replicas
    work: Work
    others: list[Pod] = field(default_factory=list)  # pods that are not the Deployments'
    kind: str = ""
    chat_gpus: list[Gpu] = field(default_factory=list)  # the chat engines' (none: their replicas hold no GPU)


def simulated_node(workdir: Path, chat_replicas: int = CHAT_REPLICAS) -> Node:
    count = MAX_REPLICAS + 1 + chat_replicas
    uuids = SimulatedNvml(count).uuids()
    gpus = [Gpu(i, uuids[i]) for i in range(MAX_REPLICAS)]
    shared = MAX_REPLICAS
    chat = [Gpu(i, uuids[i]) for i in range(shared + 1, count)]
    spec = {
        "gpus": count,
        "processes": {shared: {INFER_PIDS["infer-a"]: 0.55, INFER_PIDS["infer-b"]: 0.2}},
        "load_file": LOAD_FILE,
        # work arrives in bursts, busy for load x 0.25 s of every 0.25 s, as real serving does: a point sample of
        # such a GPU jumps between 0 and 100, the collector's mean over each second is the load itself
        "period": 0.25,
    }
    (workdir / "simulation.yaml").write_text(yaml.safe_dump(spec))
    work = SimulatedWork(workdir / LOAD_FILE, [*gpus, *chat])
    proc = ProcTree(workdir / "proc")
    others = []
    for number, name in enumerate(INFER):
        uid = f"00000000-0000-4000-8000-00000000{INFER_PIDS[name]:04d}"
        proc.add(INFER_PIDS[name], v2_systemd(uid))
        replica = f"{uuids[shared]}::{number}"
        others.append(Pod(name, {"app": "infer"}, (replica,), resource="nvidia.com/gpu.shared", uid=uid))
    args = ["--simulate-spec", str(workdir / "simulation.yaml"), "--proc-root", str(proc.root), "--shared-window",
            "5000"]  # fmt: skip
    return Node(args, gpus, work, others, "simulated H200s", chat)


def simulated_setup(workdir: Path, loads: tuple[float, ...] = (0.15, 0.2, 0.1)) -> tuple[list[str], list[Pod]]:
    """The simulated node with a fixed pod per load in ``loads`` (``trainer-0``...), each on its own busy GPU, and the
    two ``infer`` pods: the collector's arguments and every pod."""
    node = simulated_node(workdir, chat_replicas=0)
    SimulatedWork(workdir / LOAD_FILE, node.gpus).write(dict(zip(node.gpus, loads, strict=False)))
    trainers = [Pod(f"trainer-{n}", {"app": "trainer"}, (gpu.uuid,)) for n, gpu in enumerate(node.gpus[: len(loads)])]
    return node.collector_args, [*trainers, *node.others]


def has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:  # no driver, no library: simulate
        return False


def real_node(workdir: Path, seconds: float, nvml: Nvml | None = None) -> Node:
    if nvml is None:
        import pynvml

        nvml = pynvml
    nvml.nvmlInit()
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        free = [
            Gpu(i, text(nvml.nvmlDeviceGetUUID(h)))
            for i, h in enumerate(handles)
            if not nvml.nvmlDeviceGetComputeRunningProcesses(h)
        ]
    finally:
        nvml.nvmlShutdown()
    if not free:
        raise RuntimeError(f"all {len(handles)} GPUs run other processes; the demo needs at least one free GPU")
    gpus = free[:MAX_REPLICAS]
    work = GpuWork(workdir, gpus, seconds + 60)  # a worker outlives the run by a minute at most, should it be killed
    return Node([], gpus, work, [], f"{len(gpus)} free GPU{'s' if len(gpus) > 1 else ''} of this machine")
