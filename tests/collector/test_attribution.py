"""Pods attached to GPU series on one node that mixes an exclusive GPU, a shared GPU and a MIG GPU."""

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pynvml
import pytest

from collector.collection import Collection
from collector.counters.source import CountersFile
from collector.nvml.api import Nvml
from collector.nvml.reader import NvmlReader
from collector.pods.attribution import Attribution
from collector.pods.cgroups import CgroupReader
from collector.pods.pod_resources import PodResourcesClient, PodResourcesWatcher
from collector.pods.process_sampler import ProcessSampler
from collector.simulation.nvml import SimulatedNvml
from harness.node import proc_tree
from harness.node.kubelet import PodResourcesServer, gpu_pod
from harness.node.nvml_trace import ReplayNvml
from harness.node.pod_directory import StaticPodDirectory
from harness.node.samples import sample

UIDS = {name: f"00000000-0000-4000-8000-0000000000{i:02d}" for i, name in enumerate("abcdefgh")}


def pre_4_9_counters() -> CountersFile:
    """The built-in counters in dcgm-exporter 4.8's names, which these tests read (the 4.10 names:
    test_dcgm_exporter_contract.py)."""
    return CountersFile(None, "pre-4.9")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Node:
    nvml: Nvml
    kubelet: PodResourcesServer
    watcher: PodResourcesWatcher
    sampler: ProcessSampler
    collection: Collection
    clock: Clock
    procs: proc_tree.ProcTree

    def run(self, seconds: float) -> None:
        """Advance time: the sampler polls every 0.2 s; the pod map is refreshed and a cycle runs every second."""
        for step in range(round(seconds / 0.2)):
            self.clock.now += 0.2
            self.sampler.poll_once()
            if step % 5 == 4:
                if self.kubelet.held.is_set():  # while the kubelet hangs, nothing can refresh the map
                    asyncio.run(self.watcher.refresh_once())
                self.collection.run_once()


def build(tmp_path: Path, nvml: Nvml, clock: Clock, synced: bool = True) -> Node:
    kubelet = PodResourcesServer(str(tmp_path / "kubelet.sock")).start()
    watcher = PodResourcesWatcher(PodResourcesClient(kubelet.socket_path), clock=clock)
    reader = NvmlReader(nvml)
    sampler = ProcessSampler(reader, window=10.0, clock=clock)
    procs = proc_tree.ProcTree(tmp_path / "proc")
    directory = StaticPodDirectory({uid: ("ml", name) for name, uid in UIDS.items()}, synced=synced)
    attribution = Attribution(reader, watcher, directory, CgroupReader(str(procs.root)), sampler)
    collection = Collection(reader, pre_4_9_counters(), attribution=attribution, clock=clock)
    return Node(nvml, kubelet, watcher, sampler, collection, clock, procs)


@pytest.fixture
def mixed(tmp_path: Path) -> Iterator[Node]:
    clock = Clock()
    nvml = SimulatedNvml(
        3,
        clock=clock,
        wall_clock=clock,
        mig={2: ["1g.18gb", "3g.71gb"]},
        processes={1: {501: 0.6, 502: 0.25, 503: 0.05}},
    )
    node = build(tmp_path, nvml, clock)
    uuid = [nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(3)]
    mig1 = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetMigDeviceHandleByIndex(nvml.nvmlDeviceGetHandleByIndex(2), 0))
    shared = "nvidia.com/gpu.shared"
    node.kubelet.pods = [
        gpu_pod("ml", "a", uuid[0], container="trainer"),
        gpu_pod("ml", "b", f"{uuid[1]}::0", resource=shared),
        gpu_pod("ml", "c", f"{uuid[1]}::1", resource=shared),
        gpu_pod("ml", "d", f"{uuid[1]}::2", resource=shared),  # holds a replica, runs nothing on the GPU
        gpu_pod("ml", "e", mig1, resource="nvidia.com/mig-1g.18gb"),
        gpu_pod("ml", "f", "nvidia2/gi2/vgpu0", resource="nvidia.com/mig-3g.71gb"),  # GKE's form
    ]
    node.procs.add(501, proc_tree.v2_systemd(UIDS["b"]))
    node.procs.add(502, proc_tree.v1(UIDS["c"]))
    # pid 503 runs on the GPU but has already exited when its cgroup is read: it is skipped
    asyncio.run(node.watcher.refresh_once())
    yield node
    node.kubelet.stop()


def test_an_exclusive_gpu_carries_its_pod(mixed: Node) -> None:
    mixed.run(2)
    c = mixed.collection
    assert sample(c, "DCGM_FI_DEV_GPU_UTIL", gpu="0", pod="a", namespace="ml", container="trainer") is not None
    assert sample(c, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", gpu="0", pod="a") is not None


def test_a_shared_gpu_is_split_by_pod(mixed: Node) -> None:
    mixed.run(12)
    c = mixed.collection
    device = sample(c, "DCGM_FI_DEV_GPU_UTIL", gpu="1", pod=None)  # type: ignore[arg-type]
    assert device == 90  # the device-wide series stays, without pod labels
    b = sample(c, "DCGM_FI_DEV_GPU_UTIL", gpu="1", pod="b")
    cc = sample(c, "DCGM_FI_DEV_GPU_UTIL", gpu="1", pod="c")
    d = sample(c, "DCGM_FI_DEV_GPU_UTIL", gpu="1", pod="d")
    assert b is not None
    assert cc is not None
    assert b == pytest.approx(90 * 0.6 / 0.9, abs=6)
    assert cc == pytest.approx(90 * 0.25 / 0.9, abs=6)
    assert d == 0
    assert sample(c, "DCGM_FI_DEV_FB_USED", gpu="1", pod="b") == 2048 + 24000
    assert sample(c, "DCGM_FI_DEV_FB_USED", gpu="1", pod="d") == 0
    assert sample(c, "gpuscale_collector_shared_gpus") == 1
    # per-pod series carry only what can be split; the rest stays device-wide
    assert sample(c, "DCGM_FI_DEV_POWER_USAGE", gpu="1", pod="b") is None


def test_mig_instances_get_their_own_series_and_pods(mixed: Node) -> None:
    mixed.run(2)
    c = mixed.collection
    e = sample(c, "DCGM_FI_DEV_FB_USED", gpu="2", GPU_I_ID="1", GPU_I_PROFILE="1g.18gb", pod="e")
    f = sample(c, "DCGM_FI_DEV_FB_USED", gpu="2", GPU_I_ID="2", GPU_I_PROFILE="3g.71gb", pod="f")
    assert e is not None
    assert f is not None
    assert e < 18 * 1024
    assert sample(c, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_I_ID="2", pod="f") is not None
    assert sample(c, "DCGM_FI_DEV_GPU_TEMP", gpu="2", pod=None) is not None  # type: ignore[arg-type]


def test_an_ended_pod_loses_its_series_within_one_refresh(mixed: Node) -> None:
    mixed.run(2)
    assert sample(mixed.collection, "DCGM_FI_DEV_GPU_UTIL", pod="a") is not None
    mixed.kubelet.pods = [p for p in mixed.kubelet.pods if p.name not in ("a", "e")]
    asyncio.run(mixed.watcher.refresh_once())
    mixed.collection.run_once()
    assert sample(mixed.collection, "DCGM_FI_DEV_GPU_UTIL", pod="a") is None
    assert sample(mixed.collection, "DCGM_FI_DEV_FB_USED", pod="e") is None
    assert sample(mixed.collection, "DCGM_FI_DEV_GPU_UTIL", gpu="0") is not None  # the GPU itself stays


def test_a_hung_kubelet_does_not_delay_collection(mixed: Node) -> None:
    """The watcher refreshes on an event loop (the collector's main thread), the cycles run on a thread of their
    own: here the loop runs on a thread and the cycles on the test's."""
    mixed.kubelet.hold()
    calls = mixed.kubelet.calls  # the fixture's refresh
    loop = asyncio.new_event_loop()
    refreshing = loop.create_task(mixed.watcher.run())
    thread = threading.Thread(target=loop.run_until_complete, args=(asyncio.wait([refreshing]),))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while mixed.kubelet.calls == calls:  # the watcher's List has reached the kubelet, where it blocks
            assert time.monotonic() < deadline, "the watcher never called the kubelet"
            time.sleep(0.01)
        mixed.run(2)  # cycles complete while the watcher's List is blocked inside the kubelet
        assert mixed.kubelet.calls == calls + 1
        assert not mixed.kubelet.held.is_set()
        assert sample(mixed.collection, "DCGM_FI_DEV_GPU_UTIL", pod="a") is not None  # the last map is served
    finally:
        mixed.kubelet.release()
        loop.call_soon_threadsafe(refreshing.cancel)
        thread.join(10)
        loop.close()


def test_without_a_synced_pod_directory_shares_are_left_out_not_zero(tmp_path: Path) -> None:
    clock = Clock()
    nvml = SimulatedNvml(1, clock=clock, wall_clock=clock, processes={0: {501: 0.5}})
    node = build(tmp_path, nvml, clock, synced=False)
    uuid = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(0))
    node.kubelet.pods = [gpu_pod("ml", "b", f"{uuid}::0"), gpu_pod("ml", "c", f"{uuid}::1")]
    asyncio.run(node.watcher.refresh_once())
    node.run(2)
    assert sample(node.collection, "DCGM_FI_DEV_GPU_UTIL", pod="b") is None
    assert sample(node.collection, "gpuscale_collector_shared_gpu_unattributed_total") == 2
    node.kubelet.stop()


def test_no_socket_means_series_without_pod_labels_and_a_self_metric(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    nvml = SimulatedNvml(1, clock=clock, wall_clock=clock)
    watcher = PodResourcesWatcher(PodResourcesClient(str(tmp_path / "missing.sock")), clock=clock)
    reader = NvmlReader(nvml)
    attribution = Attribution(reader, watcher, None, CgroupReader(str(tmp_path)), None)
    collection = Collection(reader, pre_4_9_counters(), attribution=attribution, clock=clock)
    for _ in range(3):
        asyncio.run(watcher.refresh_once())
        collection.run_once()
    assert sample(collection, "DCGM_FI_DEV_GPU_UTIL", gpu="0") is not None
    assert all(
        "pod" not in dict(labels)
        for f in collection.latest.families
        if f.name.startswith("DCGM")
        for labels, _ in f.samples
    )
    assert sample(collection, "gpuscale_collector_pod_mapping_up") == 0
    assert sample(collection, "gpuscale_collector_pod_mapping_errors_total", kind="NoSocket") == 3
    assert len([r for r in caplog.records if "does not exist" in r.getMessage()]) == 1


def test_ready_once_the_kubelet_answered_and_the_directory_listed(tmp_path: Path) -> None:
    """What the collection thread waits for before its first cycle, at most so long, or until it is stopped."""
    kubelet = PodResourcesServer(str(tmp_path / "kubelet.sock")).start()
    try:
        watcher = PodResourcesWatcher(PodResourcesClient(kubelet.socket_path))
        directory = StaticPodDirectory(synced=False)
        attribution = Attribution(NvmlReader(SimulatedNvml(1)), watcher, directory, CgroupReader(str(tmp_path)), None)
        stop = threading.Event()
        assert not attribution.wait_ready(0.05, stop)  # neither has answered
        asyncio.run(watcher.refresh_once())
        assert not attribution.wait_ready(0.05, stop)  # the directory has not listed the pods
        stop.set()
        assert not attribution.wait_ready(60, stop)  # a stop ends the wait at once
        directory.synced = True
        assert attribution.wait_ready(0.05, threading.Event())
    finally:
        kubelet.stop()


@pytest.fixture
def h200_shared(tmp_path: Path) -> Iterator[Node]:
    """The H200 recorded with two GEMM processes at duty cycles 0.9 and 0.2 sharing it, pods g and h, the map read."""
    clock = Clock()
    nvml = ReplayNvml.load("h200", "shared")
    node = build(tmp_path, nvml, clock)
    heavy, light = nvml.meta["shared_pids"]["heavy_duty_0.9"], nvml.meta["shared_pids"]["light_duty_0.2"]
    node.procs.add(heavy, proc_tree.v2_systemd(UIDS["g"]))
    node.procs.add(light, proc_tree.v2_cgroupfs(UIDS["h"]))
    uuid = nvml.recorded("nvmlDeviceGetUUID", "gpu0")
    node.kubelet.pods = [gpu_pod("ml", "g", f"{uuid}::0"), gpu_pod("ml", "h", f"{uuid}::1")]
    asyncio.run(node.watcher.refresh_once())
    yield node
    node.kubelet.stop()


def test_shares_from_what_the_h200_recorded_for_two_processes(h200_shared: Node) -> None:
    """Replays NVML's per-process samples of two GEMM processes at duty cycles 0.9 and 0.2 sharing the H200."""
    node = h200_shared
    node.run(10)
    g = sample(node.collection, "DCGM_FI_DEV_GPU_UTIL", pod="g")
    h = sample(node.collection, "DCGM_FI_DEV_GPU_UTIL", pod="h")
    device = sample(node.collection, "DCGM_FI_DEV_GPU_UTIL", pod=None)  # type: ignore[arg-type]
    assert g is not None
    assert h is not None
    assert device is not None
    # NVML credits each 200 ms sample window to one process: the heavy one held 63 of the 71 recorded windows
    assert g > 2 * h > 0
    assert g + h == pytest.approx(device, abs=0.02)  # the device's interval mean, split: nothing lost or added
    assert sample(node.collection, "DCGM_FI_DEV_FB_USED", pod="g") == 1002  # 1050673152 bytes, as NVML said


def test_while_per_process_reads_fail_pods_keep_memory_and_get_no_utilization_share(
    h200_shared: Node, caplog: pytest.LogCaptureFixture
) -> None:
    node = h200_shared
    nvml = node.nvml
    assert isinstance(nvml, ReplayNvml)
    # the first cycle makes the GPU shared, so nothing was sampled yet: no share, rather than a 0 for each pod
    node.collection.run_once()
    assert sample(node.collection, "DCGM_FI_DEV_GPU_UTIL", pod="g") is None
    assert sample(node.collection, "DCGM_FI_DEV_FB_USED", pod="g") == 1002
    node.run(4)
    assert sample(node.collection, "DCGM_FI_DEV_GPU_UTIL", pod="g")
    nvml.fail("nvmlDeviceGetProcessUtilization", pynvml.NVML_ERROR_UNKNOWN, gpu="gpu0")
    node.run(12)  # longer than the 10 s window: what it held has aged out
    c = node.collection
    device = sample(c, "DCGM_FI_DEV_GPU_UTIL", pod=None)  # type: ignore[arg-type]
    assert device  # the GPU is busy ...
    assert sample(c, "DCGM_FI_DEV_GPU_UTIL", pod="g") is None  # ... and its pods would read 0 from an empty window
    assert sample(c, "DCGM_FI_DEV_GPU_UTIL", pod="h") is None
    assert sample(c, "DCGM_FI_DEV_FB_USED", pod="g") == 1002  # memory comes from another call: still split
    # the first cycle and, of the twelve since the fault, the eleven whose last read is more than 1.5 s old
    assert sample(c, "gpuscale_collector_shared_gpu_utilization_unsplit_total") == 1 + 11
    assert sample(c, "gpuscale_collector_process_sampler_errors_total") == 60
    warnings = [r.getMessage() for r in caplog.records if "utilization share" in r.getMessage()]
    assert len(warnings) == 1  # once a minute, not five times a second
    assert "GPU 0: per-process utilization" in warnings[0]
    nvml.clear_faults()
    node.run(2)
    assert sample(node.collection, "DCGM_FI_DEV_GPU_UTIL", pod="g")
