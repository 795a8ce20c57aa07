"""The demo's parts that need no running chain: the Deployment, the work's spread, the real-GPU workers (with a
stand-in program where there is no GPU), the choice of free GPUs, the console and the shortened answer."""

import asyncio
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from collector.simulation.nvml import SimulatedNvml
from demo.console import Console
from demo.deployment import Deployment, Gpu
from demo.gpu_work import GpuWork
from demo.kubectl import block
from demo.node import MAX_REPLICAS, has_gpu, real_node
from demo.stack import Pod
from demo.workload import LoadScript, SharedWork, SimulatedWork, Workload, duty

ROOT = Path(__file__).resolve().parents[2]

GPUS = [Gpu(i, f"GPU-{i}") for i in range(3)]


def test_replicas_take_free_gpus_and_the_newest_go_first() -> None:
    applied: list[list[Pod]] = []
    trainer = Deployment("trainer", GPUS, applied.append)
    trainer.scale(3)
    assert {p.name: p.device_ids for p in applied[-1]} == {
        "trainer-0": ("GPU-0",), "trainer-1": ("GPU-1",), "trainer-2": ("GPU-2",)
    }  # fmt: skip
    assert all(p.labels == {"app": "trainer"} for p in applied[-1])
    trainer.scale(1)
    assert [p.name for p in applied[-1]] == ["trainer-0"]
    trainer.scale(2)
    assert trainer.pods == {"trainer-0": GPUS[0], "trainer-1": GPUS[1]}
    with pytest.raises(ValueError, match="trainer: 4 replicas asked, 3 GPUs free"):
        trainer.scale(4)


def test_replicas_without_gpus_are_pods_in_their_namespace_with_no_device() -> None:
    applied: list[list[Pod]] = []
    chat = Deployment("chat", [], applied.append, namespace="llm", labels={"tier": "engine"}, max_replicas=2)
    assert chat.capacity == 2
    chat.scale(2)
    labels = {"app": "chat", "tier": "engine"}
    assert [(p.name, p.namespace, p.device_ids, p.labels) for p in applied[-1]] == [
        ("chat-0", "llm", (), labels), ("chat-1", "llm", (), labels)
    ]  # fmt: skip
    assert chat.labels == {"app": "chat"}  # the selector's
    assert chat.names == ("chat-0", "chat-1")
    assert chat.pods == {}
    chat.scale(0)
    assert applied[-1] == []
    with pytest.raises(ValueError, match="a GPU each or none"):
        Deployment("chat", GPUS, applied.append, max_replicas=2)


async def test_deployments_sharing_one_load_file_keep_each_others_gpus(tmp_path: Path) -> None:
    work = SimulatedWork(tmp_path / "loads.yaml", GPUS)
    shared = SharedWork(work)
    await shared.part("trainer").set({GPUS[0]: 0.5})
    await shared.part("chat").set({GPUS[2]: 0.25})
    assert yaml.safe_load((tmp_path / "loads.yaml").read_text()) == {0: 0.5, 1: 0, 2: 0.25}
    await shared.part("trainer").set({GPUS[1]: 1.0})  # trainer-0 went, trainer-1 came: GPU 0 idle again
    assert yaml.safe_load((tmp_path / "loads.yaml").read_text()) == {0: 0, 1: 1.0, 2: 0.25}


@pytest.mark.parametrize(
    ("total", "replicas", "each"), [(2.7, 1, 1.0), (2.7, 2, 1.0), (2.7, 3, 0.9), (2.7, 4, 0.675), (0.5, 4, 0.125)]
)
def test_the_work_spreads_evenly_and_a_gpu_is_busy_all_the_time_at_most(
    total: float, replicas: int, each: float
) -> None:
    assert duty(total, replicas) == pytest.approx(each)


def test_the_script_and_its_stretch() -> None:
    script = LoadScript(((0, 0.5), (10, 2.7), (44, 0.5)))
    assert [script.total(t) for t in (0, 9.9, 10, 43.9, 44, 75)] == [0.5, 0.5, 2.7, 2.7, 0.5, 0.5]
    assert script.stretched(2).total(87) == 2.7
    assert script.describe() == "0.5 GPU from 0 s, 2.7 GPU from 10 s, 0.5 GPU from 44 s"


async def test_simulated_gpus_get_the_spread_in_the_collectors_load_file(tmp_path: Path) -> None:
    trainer = Deployment("trainer", GPUS, lambda pods: None)
    work = SimulatedWork(tmp_path / "loads.yaml", GPUS)
    assert yaml.safe_load((tmp_path / "loads.yaml").read_text()) == {0: 0, 1: 0, 2: 0}
    workload = Workload(LoadScript(((0, 2.7),)), trainer, work)
    trainer.scale(3)
    assert await workload.update(0) == pytest.approx(0.9)
    assert yaml.safe_load((tmp_path / "loads.yaml").read_text()) == {0: 0.9, 1: 0.9, 2: 0.9}
    trainer.scale(1)
    await workload.update(1)
    assert yaml.safe_load((tmp_path / "loads.yaml").read_text()) == {0: 1.0, 1: 0, 2: 0}


def test_free_gpus_are_the_ones_no_process_uses(tmp_path: Path) -> None:
    nvml = SimulatedNvml(4, processes={1: {501: 0.5}})
    setup = real_node(tmp_path, 75, nvml)
    assert [g.index for g in setup.gpus] == [0, 2, 3]
    assert [g.uuid for g in setup.gpus] == [nvml.uuids()[i] for i in (0, 2, 3)]
    assert setup.kind == "3 free GPUs of this machine"
    assert len(real_node(tmp_path, 75, SimulatedNvml(MAX_REPLICAS + 2)).gpus) == MAX_REPLICAS
    with pytest.raises(RuntimeError, match="all 1 GPUs run other processes"):
        real_node(tmp_path, 75, SimulatedNvml(1, processes={0: {7: 1.0}}))


@pytest.mark.skipif(has_gpu(), reason="this machine has a GPU: the worker would start")
async def test_without_a_gpu_the_workers_say_why(tmp_path: Path) -> None:
    work = GpuWork(tmp_path, [GPUS[0]], seconds=30)
    with pytest.raises(RuntimeError, match=r"the load on GPU 0 ended \(exit 2\): gpuscale-load: error: "):
        await work.start()
    await work.close()


# A stand-in for gpuscale-load where there is no GPU: says it started as gpuscale-load does, then records each duty it
# reads from its file, with the GPU it was given.
WORKER = textwrap.dedent("""
    import os, sys, time
    args = sys.argv[1:]
    duty_file, record = args[args.index("--duty-file") + 1], sys.argv[1]
    sys.stderr.write("load started at 0\\n"); sys.stderr.flush()
    last = None
    while True:
        duty = open(duty_file).read().strip()
        if duty != last:
            with open(record, "a") as f:
                f.write(f"{os.environ['CUDA_VISIBLE_DEVICES']} {duty}\\n")
            last = duty
        time.sleep(0.02)
""")


def worker(tmp_path: Path, gpu: Gpu) -> GpuWork:
    (tmp_path / "worker.py").write_text(WORKER)
    program = [sys.executable, str(tmp_path / "worker.py"), str(tmp_path / f"seen-{gpu.index}")]
    return GpuWork(tmp_path, [gpu], 30, program=program)


async def test_workers_start_idle_follow_their_duty_and_end_with_the_demo(tmp_path: Path) -> None:
    def record(gpu: Gpu) -> list[str]:
        path = tmp_path / f"seen-{gpu.index}"
        return path.read_text().splitlines() if path.exists() else []

    works = [worker(tmp_path, gpu) for gpu in GPUS[:2]]
    for work in works:
        await work.start()
    await works[0].set({GPUS[0]: 0.675})
    for _ in range(250):
        if record(GPUS[0])[-1:] == ["GPU-0 0.6750"]:
            break
        await asyncio.sleep(0.02)
    assert record(GPUS[0]) == ["GPU-0 0.0000", "GPU-0 0.6750"]
    assert record(GPUS[1]) == ["GPU-1 0.0000"]
    processes = [p for work in works for p in work._processes.values()]
    for work in works:
        await work.close()
    assert all(p.returncode is not None for p in processes)


async def test_a_worker_that_dies_is_reported_at_the_next_change(tmp_path: Path) -> None:
    work = worker(tmp_path, GPUS[0])
    await work.start()
    process = work._processes[GPUS[0]]
    process.kill()
    await process.wait()
    with pytest.raises(RuntimeError, match=r"the load on GPU 0 ended \(exit -9\)"):
        await work.set({GPUS[0]: 0.5})
    await work.close()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_progress_line_and_a_pipe_only_lines() -> None:
    terminal, pipe = Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        console = Console(stream, seconds=75)
        console.progress(30, "4 replicas")
        console.print("  30s  row")
        console.progress(45, "4 replicas")
        console.end()
    assert pipe.getvalue() == "  30s  row\n"
    at_30, at_45 = "[########............]  45 s left  4 replicas", "[############........]  30 s left  4 replicas"
    # the progress line; the row over it and the progress line again; the next progress; erased at the end
    assert terminal.getvalue() == f"\r\033[K{at_30}\r\033[K  30s  row\n{at_30}\r\033[K{at_45}\r\033[K"


def test_the_answer_is_printed_whole_as_kubectl_wrote_it() -> None:
    described = {"kind": "Pod", "namespace": "ml", "name": "trainer-0", "apiVersion": "v1"}
    item = {"describedObject": described, "metric": {"name": "gpu_utilization", "selector": None},
            "timestamp": "2026-12-03T11:26:44Z", "windowSeconds": 60, "value": "67500m"}  # fmt: skip
    second = {**item, "describedObject": {**described, "name": "trainer-1"}, "value": "67"}
    answer = json.dumps({"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {},
                         "items": [item, second]}, separators=(",", ":")) + "\n"  # fmt: skip
    assert block("kubectl get --raw '/apis/x'", answer) == f"$ kubectl get --raw '/apis/x'\n{answer[:-1]}"
    note = "(kubectl not found: the answer the HPA got over HTTP)"
    assert block("kubectl get --raw '/apis/x'", answer, note).splitlines()[1:] == [answer[:-1], note]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--png", "/no/such/dir/x.png"], "--png /no/such/dir/x.png: there is no directory /no/such/dir"),
        (["--png", "picture.jpg"], "--png picture.jpg: the file would not be what its name says"),
        (["--html", "/no/such/dir/page.html"], "--html /no/such/dir/page.html: there is no directory /no/such/dir"),
        (["--html", "page.png"], "--html page.png: the file would not be what its name says"),
    ],
)
def test_output_paths_are_checked_before_anything_starts(args: list[str], said: str) -> None:
    done = subprocess.run([sys.executable, "-m", "demo", *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith(f"python -m demo: error: {said}")
    assert "starting the chain" not in done.stdout  # nothing ran: the run is not lost at its end
