"""The NVML reader against NVML answers recorded on a real H200 (harness/node/traces/h200.json)."""

import logging

import pynvml
import pytest

from collector.errors import NvmlReadError
from collector.nvml.fields import FIELDS
from collector.nvml.reader import NvmlReader
from harness.node.nvml_trace import ReplayNvml

ALL = frozenset(FIELDS)


def opened(nvml: ReplayNvml, **kwargs: int) -> NvmlReader:
    reader = NvmlReader(nvml, **kwargs)
    reader.open()
    return reader


def test_identity_labels_come_from_nvml(h200: ReplayNvml) -> None:
    reader = opened(h200)
    (gpu,) = reader.gpus
    assert gpu.uuid == h200.recorded("nvmlDeviceGetUUID", "gpu0")
    assert gpu.uuid.startswith("GPU-")
    assert gpu.model == "NVIDIA H200"
    assert gpu.device == "nvidia0"
    assert len(gpu.pci_bus_id) == 16
    assert gpu.pci_bus_id.startswith("00000000:")
    assert reader.driver_version == "580.159.04"


def test_idle_and_loaded_values_are_what_the_h200_reported(h200: ReplayNvml) -> None:
    reader = opened(h200)
    reader.read(ALL)  # the first GPM sample; profiling values need two
    idle = reader.read(ALL).readings[0].values
    h200.phase = "gemm"
    reader.read(ALL)
    loaded = reader.read(ALL).readings[0].values
    assert idle["DCGM_FI_DEV_GPU_UTIL"] == 0
    assert idle["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] < 0.01
    assert loaded["DCGM_FI_DEV_GPU_UTIL"] > 90
    assert loaded["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] > 0.9
    assert loaded["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] > 0.8
    assert 0 <= loaded["DCGM_FI_PROF_SM_OCCUPANCY"] <= 1
    assert loaded["DCGM_FI_DEV_POWER_USAGE"] > 2 * idle["DCGM_FI_DEV_POWER_USAGE"]
    assert loaded["DCGM_FI_DEV_FB_USED"] > idle["DCGM_FI_DEV_FB_USED"]
    assert loaded["DCGM_FI_PROF_PCIE_TX_BYTES"] >= 0
    # units: MiB, W, ratios
    assert idle["DCGM_FI_DEV_FB_FREE"] + idle["DCGM_FI_DEV_FB_USED"] + idle["DCGM_FI_DEV_FB_RESERVED"] == pytest.approx(
        idle["DCGM_FI_DEV_FB_TOTAL"], abs=2
    )
    assert 50 < idle["DCGM_FI_DEV_POWER_USAGE"] < 200


def test_profiling_values_appear_from_the_second_cycle(h200: ReplayNvml) -> None:
    reader = opened(h200)
    first = reader.read(ALL).readings[0].values
    second = reader.read(ALL).readings[0].values
    assert not any(name.startswith("DCGM_FI_PROF_") for name in first)
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in second
    assert reader.unsupported.keys().isdisjoint({(0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")})


def test_what_the_h200_does_not_support_is_absent_and_said_once(
    h200: ReplayNvml, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    reader = opened(h200)
    for _ in range(4):
        values = reader.read(ALL).readings[0].values
    absent = {"DCGM_FI_DEV_FAN_SPEED", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_PROF_NVLINK_TX_BYTES"}
    assert absent.isdisjoint(values)
    assert {(0, name) for name in absent} <= reader.unsupported.keys()
    fan_lines = [r for r in caplog.records if "DCGM_FI_DEV_FAN_SPEED" in r.getMessage()]
    assert len(fan_lines) == 1
    # unsupported readings are not asked again
    assert h200.calls.count("nvmlDeviceGetFanSpeed") == 1


def test_a_lost_gpu_costs_its_series_while_the_others_keep_flowing() -> None:
    nvml = ReplayNvml.load("h200", "gemm", gpus=3)
    reader = opened(nvml)
    recorded = nvml.recorded("nvmlDeviceGetUUID", "gpu0")
    assert [g.uuid for g in reader.gpus] == [recorded, recorded[:-2] + "01", recorded[:-2] + "02"]
    nvml.fail("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_GPU_IS_LOST, gpu="gpu1")
    result = reader.read(ALL)
    assert [r.gpu.index for r in result.readings] == [0, 2]
    assert result.lost == 1
    assert result.errors[("1", "GpuIsLost")] == 1
    nvml.clear_faults()
    assert [r.gpu.index for r in reader.read(ALL).readings] == [0, 1, 2]


def test_a_transient_error_costs_one_reading_for_one_cycle(h200: ReplayNvml) -> None:
    reader = opened(h200)
    h200.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_TIMEOUT, times=1)
    result = reader.read(ALL)
    values = result.readings[0].values
    assert "DCGM_FI_DEV_POWER_USAGE" not in values
    assert "DCGM_FI_DEV_GPU_UTIL" in values
    assert result.errors[("0", "Timeout")] == 1
    assert "DCGM_FI_DEV_POWER_USAGE" in reader.read(ALL).readings[0].values


def test_a_field_turning_not_supported_is_dropped_for_good(h200: ReplayNvml) -> None:
    reader = opened(h200)
    h200.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED)
    reader.read(ALL)
    assert reader.unsupported[(0, "DCGM_FI_DEV_POWER_USAGE")] == "NotSupported"
    h200.clear_faults()
    assert "DCGM_FI_DEV_POWER_USAGE" not in reader.read(ALL).readings[0].values


def test_slow_fields_are_read_every_nth_cycle_and_served_in_between(h200: ReplayNvml) -> None:
    reader = opened(h200, slow_every=5)
    for _ in range(10):
        assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in reader.read(ALL).readings[0].values
    assert h200.calls.count("nvmlDeviceGetTotalEnergyConsumption") == 2
    assert h200.calls.count("nvmlDeviceGetPowerUsage") == 10


def test_only_requested_fields_are_read(h200: ReplayNvml) -> None:
    reader = opened(h200)
    values = reader.read(frozenset({"DCGM_FI_DEV_GPU_UTIL"})).readings[0].values
    assert values.keys() == {"DCGM_FI_DEV_GPU_UTIL"}
    assert "nvmlDeviceGetPowerUsage" not in h200.calls
    assert "nvmlGpmSampleGet" not in h200.calls


def test_counters_never_go_backwards_across_load_phases(h200: ReplayNvml) -> None:
    reader = opened(h200, slow_every=1)
    seen = []
    for phase in ["idle", "gemm", "idle", "shared", "idle"] * 3:
        h200.phase = phase
        seen.append(reader.read(ALL).readings[0].values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])
    assert seen == sorted(seen)
    assert seen[-1] > seen[0]


def test_per_process_reads_of_a_shared_gpu() -> None:
    nvml = ReplayNvml.load("h200", "shared")
    reader = opened(nvml)
    pids = set(nvml.meta["shared_pids"].values())
    assert reader.process_memory(0) == {pid: 1050673152 for pid in pids}
    samples = reader.process_utilization(0, 0)
    assert samples
    assert {s.pid for s in samples} <= pids


def test_per_process_reads_degrade_as_the_sampler_expects() -> None:
    nvml = ReplayNvml.load("h200", "idle")
    reader = opened(nvml)
    assert reader.process_utilization(0, 0) == []  # NotFound: no process ran since
    nvml.fail("nvmlDeviceGetProcessUtilization", pynvml.NVML_ERROR_UNKNOWN)
    nvml.fail("nvmlDeviceGetComputeRunningProcesses", pynvml.NVML_ERROR_UNKNOWN)
    with pytest.raises(NvmlReadError, match="GPU 0: per-process utilization: Unknown"):
        reader.process_utilization(0, 0)
    assert reader.process_memory(0) == {}
    with pytest.raises(NvmlReadError, match="GPU 1 is not open"):
        reader.process_utilization(1, 0)
