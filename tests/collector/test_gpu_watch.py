"""``--enable-gpu-bind-unbind-watch``: GPUs bound to or unbound from the driver are enumerated again, no restart."""

import asyncio
import contextlib
import time
from pathlib import Path

import pynvml
import pytest

from collector.collection import Collection
from collector.nvml.gpu_watch import BindWatch, SysfsGpus
from collector.nvml.reader import NvmlReader
from collector.simulation.nvml import SimulatedNvml
from harness.node.collector_process import running_collector, scrape

UTIL = "DCGM_FI_DEV_GPU_UTIL, gauge, u\n"


def test_the_driver_directory_lists_bound_gpus_by_pci_address(tmp_path: Path) -> None:
    driver = tmp_path / "nvidia"
    assert SysfsGpus(driver).present_gpus() == frozenset()  # driver not loaded
    driver.mkdir()
    for name in ("0000:19:00.0", "0000:2A:00.0", "bind", "unbind", "new_id", "remove_id", "module", "uevent"):
        (driver / name).touch()
    assert SysfsGpus(driver).present_gpus() == {"0000:19:00.0", "0000:2a:00.0"}


def test_simulated_gpus_unbind_as_the_driver_does() -> None:
    gone: set[int] = set()
    nvml = SimulatedNvml(3, absent=lambda index, _t: index in gone)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(1)
    uuids = nvml.uuids()
    assert len(nvml.present_gpus()) == 3
    gone.add(1)
    assert nvml.present_gpus() == {"00000000:19:00.0", "00000000:39:00.0"}
    with pytest.raises(pynvml.NVMLError) as lost:
        nvml.nvmlDeviceGetUUID(handle)
    assert lost.value.value == pynvml.NVML_ERROR_GPU_IS_LOST
    assert nvml.nvmlDeviceGetCount() == 3  # NVML enumerates when it starts
    nvml.nvmlShutdown()
    nvml.nvmlInit()
    assert nvml.nvmlDeviceGetCount() == 2
    assert nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(1)) == uuids[2]  # indexes close up, as NVML's


def _gpus(collection: Collection) -> dict[str, str]:
    family = next(f for f in collection.latest.families if f.name == "DCGM_FI_DEV_GPU_UTIL")
    return {dict(labels)["gpu"]: dict(labels)["UUID"] for labels, _ in family.samples}


async def test_a_change_of_bound_gpus_reenumerates_them_at_the_next_cycle(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    gone: set[int] = set()
    nvml = SimulatedNvml(3, absent=lambda index, _t: index in gone)
    counters = tmp_path / "counters.csv"
    counters.write_text(UTIL)
    collection = Collection(NvmlReader(nvml), str(counters))
    uuids = nvml.uuids()
    changes: list[str] = []

    def changed(why: str) -> None:
        changes.append(why)
        collection.request_rescan(why)

    watch = asyncio.create_task(BindWatch(nvml, changed, interval=0.05).run())
    await asyncio.sleep(0)  # the watch takes its baseline listing
    try:
        collection.run_once()
        assert _gpus(collection) == {"0": uuids[0], "1": uuids[1], "2": uuids[2]}
        gone.add(1)
        async with asyncio.timeout(5):
            while not changes:
                await asyncio.sleep(0.02)
        assert changes == ["GPU(s) unbound: 00000000:29:00.0"]
        collection.run_once()
        assert _gpus(collection) == {"0": uuids[0], "1": uuids[2]}
        assert collection.health.ok
        assert "GPU(s) unbound: 00000000:29:00.0: enumerating the GPUs again" in caplog.text
        gone.clear()
        async with asyncio.timeout(5):
            while len(changes) < 2:
                await asyncio.sleep(0.02)
        assert changes[1] == "GPU(s) bound: 00000000:29:00.0"
        collection.run_once()
        assert _gpus(collection) == {"0": uuids[0], "1": uuids[1], "2": uuids[2]}
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        collection.stop()


async def test_a_listing_that_fails_is_said_once_and_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    class Unreadable:
        def present_gpus(self) -> frozenset[str]:
            raise PermissionError("Permission denied: '/sys/bus/pci/drivers/nvidia'")

    changes: list[str] = []
    watch = asyncio.create_task(BindWatch(Unreadable(), changes.append, interval=0.01).run())
    await asyncio.sleep(0.2)
    watch.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watch
    assert changes == []
    assert caplog.text.count("cannot list the GPUs bound to the driver") == 1


def test_the_command_line_follows_a_gpu_that_leaves_and_comes_back(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("gpus: 2\nabsent: {1: [[6, 12]]}\n")  # GPU 1 unbound from 6 s to 12 s into the run
    log = tmp_path / "collector.log"
    with running_collector("--simulate-spec", str(spec), "-c", "200", "--dcgm-names", "pre-4.9",
                           "--enable-gpu-bind-unbind-watch",
                           "--gpu-bind-unbind-poll-interval", "200ms", log=log) as url:  # fmt: skip
        seen: list[str] = []
        deadline = time.monotonic() + 40
        while len(seen) < 3:
            body = scrape(url)[0]
            gpus = "gpuscale_collector_gpus 2" if "gpuscale_collector_gpus 2" in body else "one"
            gpus = gpus if "gpuscale_collector_gpus 1" not in body else "gpuscale_collector_gpus 1"
            if not seen or seen[-1] != gpus:
                seen.append(gpus)
            assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0"' in body  # the GPU that stays never leaves the page
            assert time.monotonic() < deadline, f"states seen: {seen}; log: {log.read_text()[-2000:]}"
            time.sleep(0.1)
        assert seen == ["gpuscale_collector_gpus 2", "gpuscale_collector_gpus 1", "gpuscale_collector_gpus 2"]
    text = log.read_text()
    assert "GPU(s) unbound: 00000000:29:00.0: enumerating the GPUs again" in text
    assert "GPU(s) bound: 00000000:29:00.0: enumerating the GPUs again" in text
