"""The collection loop: publishing, health, NVML start failures and retries, configuration reloads."""

from collections.abc import Callable
from pathlib import Path

import pynvml

from collector.collection import Collection
from harness.node.nvml_trace import ReplayNvml
from harness.node.samples import sample

MakeCollection = Callable[..., Collection]


def test_a_cycle_publishes_gpu_series_with_dcgm_labels(h200: ReplayNvml, make_collection: MakeCollection) -> None:
    collection = make_collection(h200)
    collection.run_once()
    family = next(f for f in collection.latest.families if f.name == "DCGM_FI_DEV_GPU_UTIL")
    ((labels, value),) = family.samples
    assert [k for k, _ in labels] == [
        "gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION",
    ]  # fmt: skip
    assert dict(labels)["Hostname"] == "node-a"
    assert dict(labels)["DCGM_FI_DRIVER_VERSION"] == "580.159.04"
    assert value == 0
    assert collection.health.ok
    assert sample(collection, "gpuscale_collector_nvml_up") == 1
    assert sample(collection, "gpuscale_collector_field_unsupported", field="DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL") == 1


def test_nvml_that_cannot_start_keeps_the_process_up_and_is_retried(make_collection: MakeCollection) -> None:
    nvml = ReplayNvml.load("h200", "idle")
    nvml.fail("nvmlInit", pynvml.NVML_ERROR_DRIVER_NOT_LOADED, times=2)
    collection = make_collection(nvml)
    delays = [collection.run_once(), collection.run_once()]
    assert delays == [1.0, 2.0]  # backing off
    assert not collection.health.ok
    assert "DriverNotLoaded" in collection.health.reason
    assert sample(collection, "gpuscale_collector_nvml_up") == 0
    assert sample(collection, "gpuscale_collector_errors_total", kind="NvmlInit") == 2
    assert sample(collection, "DCGM_FI_DEV_GPU_UTIL") is None
    assert collection.run_once() == collection.interval
    assert collection.health.ok
    assert sample(collection, "DCGM_FI_DEV_GPU_UTIL") == 0


def test_when_every_gpu_is_lost_nvml_is_restarted(make_collection: MakeCollection) -> None:
    nvml = ReplayNvml.load("h200", "idle", gpus=2)
    collection = make_collection(nvml)
    collection.run_once()
    nvml.fail("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_GPU_IS_LOST)
    collection.run_once()
    assert not collection.health.ok
    assert sample(collection, "DCGM_FI_DEV_GPU_UTIL") is None
    assert sample(collection, "gpuscale_collector_errors_total", gpu="1", kind="GpuIsLost") == 1
    collection.run_once()
    collection.run_once()  # third cycle in a row: NVML is shut down
    assert nvml.calls.count("nvmlShutdown") == 1
    nvml.clear_faults()
    collection.run_once()  # started again
    assert nvml.calls.count("nvmlInit") == 2
    assert collection.health.ok
    assert sample(collection, "DCGM_FI_DEV_GPU_UTIL", gpu="1") == 0


def test_one_lost_gpu_keeps_health_ok_and_the_others_flowing(make_collection: MakeCollection) -> None:
    nvml = ReplayNvml.load("h200", "gemm", gpus=2)
    collection = make_collection(nvml)
    nvml.fail("nvmlDeviceGetSamples", pynvml.NVML_ERROR_GPU_IS_LOST, gpu="gpu0")
    collection.run_once()
    assert collection.health.ok
    assert sample(collection, "DCGM_FI_DEV_GPU_UTIL", gpu="0") is None
    assert sample(collection, "DCGM_FI_DEV_GPU_UTIL", gpu="1") is not None


def write(path: Path, fields: list[str]) -> None:
    path.write_text("".join(f"{f}, gauge, help for {f}\n" for f in fields))


def test_reload_swaps_the_counters_between_cycles(
    tmp_path: Path, h200: ReplayNvml, make_collection: MakeCollection
) -> None:
    path = tmp_path / "counters.csv"
    write(path, ["DCGM_FI_DEV_GPU_UTIL"])
    collection = make_collection(h200, str(path))
    collection.run_once()
    assert sample(collection, "DCGM_FI_DEV_POWER_USAGE") is None
    write(path, ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"])
    collection.request_reload()
    before = collection.latest
    assert sample(collection, "DCGM_FI_DEV_GPU_UTIL") is not None  # the old set is served until the new one is ready
    collection.run_once()
    assert collection.latest is not before
    assert sample(collection, "DCGM_FI_DEV_POWER_USAGE") is not None
    assert sample(collection, "gpuscale_collector_config_reloads_total") == 1


def test_a_broken_file_on_reload_keeps_the_old_configuration(
    tmp_path: Path, h200: ReplayNvml, make_collection: MakeCollection
) -> None:
    path = tmp_path / "counters.csv"
    write(path, ["DCGM_FI_DEV_GPU_UTIL"])
    collection = make_collection(h200, str(path))
    collection.run_once()
    path.write_text("DCGM_FI_DEV_GPU_UTIL, not-a-type, x\n")
    collection.request_reload()
    collection.run_once()
    assert sample(collection, "DCGM_FI_DEV_GPU_UTIL") == 0
    assert sample(collection, "gpuscale_collector_config_reload_errors_total") == 1
    assert [c.field for c in collection.counters.counters] == ["DCGM_FI_DEV_GPU_UTIL"]


def test_a_changed_file_is_reloaded_without_a_signal(
    tmp_path: Path, h200: ReplayNvml, make_collection: MakeCollection
) -> None:
    import os

    path = tmp_path / "counters.csv"
    write(path, ["DCGM_FI_DEV_GPU_UTIL"])
    collection = make_collection(h200, str(path))
    collection.run_once()
    write(path, ["DCGM_FI_DEV_GPU_TEMP"])
    os.utime(path, (1, 1))  # a different mtime even within the file system's time resolution
    collection.run_once()
    assert sample(collection, "DCGM_FI_DEV_GPU_UTIL") is None
    assert sample(collection, "DCGM_FI_DEV_GPU_TEMP") is not None


def test_exposition_renders_once_per_snapshot(h200: ReplayNvml, make_collection: MakeCollection) -> None:
    collection = make_collection(h200)
    collection.run_once()
    first = collection.latest.text()
    assert collection.latest.text() is first
    assert b"DCGM_FI_DEV_GPU_UTIL{" in first
    assert collection.latest.openmetrics().endswith(b"# EOF\n")


def test_the_background_thread_collects_on_its_interval(h200: ReplayNvml, make_collection: MakeCollection) -> None:
    collection = make_collection(h200, interval=0.05)
    collection.start()
    try:
        import time

        deadline = time.monotonic() + 10
        while (sample(collection, "gpuscale_collector_collections_total") or 0) < 3:
            assert time.monotonic() < deadline, "collection thread made no progress"
            time.sleep(0.02)
    finally:
        collection.stop()
    assert nvml_closed(h200)


def nvml_closed(nvml: ReplayNvml) -> bool:
    return nvml.calls[-1] == "nvmlShutdown"
