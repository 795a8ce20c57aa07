"""The collector under random faults for many cycles: NVML errors per field and per GPU, a lost GPU, the kubelet's
socket vanishing and coming back, processes exiting mid-read. /metrics keeps answering with a valid page, and no
counter ever goes backwards."""

import asyncio
import random
from pathlib import Path

import pynvml
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from collector.collection import Collection
from collector.nvml.reader import NvmlReader
from collector.pods.attribution import Attribution
from collector.pods.cgroups import CgroupReader
from collector.pods.pod_resources import PodResourcesClient, PodResourcesWatcher
from collector.pods.process_sampler import ProcessSampler
from harness.node.kubelet import PodResourcesServer, gpu_pod
from harness.node.nvml_trace import ReplayNvml
from harness.node.pod_directory import StaticPodDirectory
from harness.node.proc_tree import ProcTree, v2_systemd

CALLS = [
    "nvmlDeviceGetSamples",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPowerUsage",
    "nvmlGpmSampleGet",
    "nvmlGpmMetricsGet",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetTemperature",
]
CODES = [pynvml.NVML_ERROR_TIMEOUT, pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN,
         pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INSUFFICIENT_SIZE, pynvml.NVML_ERROR_MEMORY]  # fmt: skip
COUNTER_TYPES = {"counter"}


def counters_of(collection: Collection) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (f.name, labels): value
        for f in collection.latest.families
        if f.type in COUNTER_TYPES
        for labels, value in f.samples
    }


def test_random_faults_never_break_a_scrape_nor_turn_a_counter_back(tmp_path: Path) -> None:
    rng = random.Random(7)
    nvml = ReplayNvml.load("h200", "shared", gpus=3)
    heavy, light = nvml.meta["shared_pids"]["heavy_duty_0.9"], nvml.meta["shared_pids"]["light_duty_0.2"]
    uuid = nvml.recorded("nvmlDeviceGetUUID", "gpu0")
    socket = str(tmp_path / "kubelet.sock")
    kubelet = PodResourcesServer(socket).start()
    pods = [gpu_pod("ml", "a", f"{uuid}::0"), gpu_pod("ml", "b", f"{uuid}::1"), gpu_pod("ml", "c", uuid[:-2] + "01")]
    kubelet.pods = pods
    proc = ProcTree(tmp_path / "proc")
    directory = StaticPodDirectory({"00000000-0000-4000-8000-00000000000a": ("ml", "a"),
                                    "00000000-0000-4000-8000-00000000000b": ("ml", "b")})  # fmt: skip
    now = [0.0]
    watcher = PodResourcesWatcher(PodResourcesClient(socket, timeout=0.5), clock=lambda: now[0])
    reader = NvmlReader(nvml, slow_every=2)
    sampler = ProcessSampler(reader, clock=lambda: now[0])
    attribution = Attribution(reader, watcher, directory, CgroupReader(str(proc.root)), sampler)
    collection = Collection(reader, None, attribution=attribution, clock=lambda: 1_800_000_000 + now[0])
    previous: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    seen_pod_series = 0
    try:
        for cycle in range(300):
            now[0] += 1.0
            nvml.clear_faults()
            for _ in range(rng.randint(0, 3)):
                gpu = rng.choice([None, "gpu0", "gpu1", "gpu2"])
                nvml.fail(rng.choice(CALLS), rng.choice(CODES), gpu=gpu, times=rng.randint(1, 3))
            if cycle % 7 == 0:  # processes come and go; their /proc entries vanish before they are read
                for pid, uid in ((heavy, "a"), (light, "b")):
                    if rng.random() < 0.5:
                        proc.add(pid, v2_systemd(f"00000000-0000-4000-8000-00000000000{uid}"))
                    elif (proc.root / str(pid)).exists():
                        proc.remove(pid)
            if cycle == 100:  # the kubelet goes away, socket and all ...
                kubelet.stop()
            if cycle == 130:  # ... and comes back on the same path
                kubelet = PodResourcesServer(socket).start()
                kubelet.pods = pods
            for _ in range(5):
                sampler.poll_once()
            asyncio.run(watcher.refresh_once())
            collection.run_once()

            text = collection.latest.text().decode()
            list(parse_text(text))  # a valid page, every cycle
            list(parse_openmetrics(collection.latest.openmetrics().decode()))  # type: ignore[no-untyped-call]
            assert "gpuscale_collector_collections_total" in text
            seen_pod_series += text.count('pod="a"')
            current = counters_of(collection)
            for key, value in current.items():
                if key in previous:
                    assert value >= previous[key], f"{key} went from {previous[key]} to {value} at cycle {cycle}"
            previous.update(current)
    finally:
        kubelet.stop()
    assert seen_pod_series > 0  # attribution worked in between the faults
    errors = [k for k in previous if k[0] == "gpuscale_collector_errors_total"]
    assert errors  # the faults were counted
    assert any(k[0] == "gpuscale_collector_pod_mapping_errors_total" for k in previous)  # the kubelet's absence too
