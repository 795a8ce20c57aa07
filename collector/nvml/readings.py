"""The NVML calls that give the fields of ``nvml/fields.py``: one *reading* per call, each yielding one or more fields.

A reading leaves out a field the device does not support (a per-value NotSupported); when the whole call is
NotSupported it raises, and the reader marks all its fields unsupported. Values are in DCGM's units.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from collector.nvml.api import Handle, Nvml
from collector.nvml.event_windows import CLOCK_EVENTS_COUNT
from collector.nvml.fields import MIB, Values

Reading = Callable[[Nvml, Handle], Values]


def _utilization(nvml: Nvml, handle: Handle) -> Values:
    rates = nvml.nvmlDeviceGetUtilizationRates(handle)
    return {"DCGM_FI_DEV_GPU_UTIL": rates.gpu, "DCGM_FI_DEV_MEM_COPY_UTIL": rates.memory}


def _encoder(nvml: Nvml, handle: Handle) -> Values:
    return {"DCGM_FI_DEV_ENC_UTIL": nvml.nvmlDeviceGetEncoderUtilization(handle)[0]}


def _decoder(nvml: Nvml, handle: Handle) -> Values:
    return {"DCGM_FI_DEV_DEC_UTIL": nvml.nvmlDeviceGetDecoderUtilization(handle)[0]}


def _memory(nvml: Nvml, handle: Handle) -> Values:
    # The v2 structure splits driver-reserved memory out of "used"; DCGM reports all three in whole MiB.
    mem = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    return {
        "DCGM_FI_DEV_FB_TOTAL": mem.total // MIB,
        "DCGM_FI_DEV_FB_FREE": mem.free // MIB,
        "DCGM_FI_DEV_FB_USED": mem.used // MIB,
        "DCGM_FI_DEV_FB_RESERVED": mem.reserved // MIB,
    }


def _power(nvml: Nvml, handle: Handle) -> Values:
    return {"DCGM_FI_DEV_POWER_USAGE": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0}


def _power_limit(nvml: Nvml, handle: Handle) -> Values:
    return {"DCGM_FI_DEV_POWER_MGMT_LIMIT": nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0}


def _energy(nvml: Nvml, handle: Handle) -> Values:
    return {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": nvml.nvmlDeviceGetTotalEnergyConsumption(handle)}


def _gpu_temp(nvml: Nvml, handle: Handle) -> Values:
    return {"DCGM_FI_DEV_GPU_TEMP": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)}


def _sm_clock(nvml: Nvml, handle: Handle) -> Values:
    return {"DCGM_FI_DEV_SM_CLOCK": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)}


def _mem_clock(nvml: Nvml, handle: Handle) -> Values:
    return {"DCGM_FI_DEV_MEM_CLOCK": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)}


def _fan(nvml: Nvml, handle: Handle) -> Values:
    return {"DCGM_FI_DEV_FAN_SPEED": nvml.nvmlDeviceGetFanSpeed(handle)}


def _pcie_replay(nvml: Nvml, handle: Handle) -> Values:
    return {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER": nvml.nvmlDeviceGetPcieReplayCounter(handle)}


def _remapped_rows(nvml: Nvml, handle: Handle) -> Values:
    correctable, uncorrectable, _pending, failure = nvml.nvmlDeviceGetRemappedRows(handle)
    return {
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": correctable,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": uncorrectable,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": failure,
    }


def _ecc(nvml: Nvml, handle: Handle) -> Values:
    def total(bit_type: int, counter: int) -> int:
        return int(nvml.nvmlDeviceGetTotalEccErrors(handle, bit_type, counter))

    return {
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": total(nvml.NVML_SINGLE_BIT_ECC, nvml.NVML_VOLATILE_ECC),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": total(nvml.NVML_DOUBLE_BIT_ECC, nvml.NVML_VOLATILE_ECC),
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": total(nvml.NVML_SINGLE_BIT_ECC, nvml.NVML_AGGREGATE_ECC),
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": total(nvml.NVML_DOUBLE_BIT_ECC, nvml.NVML_AGGREGATE_ECC),
    }


def _clock_events(nvml: Nvml, handle: Handle) -> Values:
    # the same bitmask feeds the count of clock events over dcgm-exporter's window (event_windows.py)
    mask = nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    return {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": mask, CLOCK_EVENTS_COUNT: mask}


def _pstate(nvml: Nvml, handle: Handle) -> Values:
    return {"DCGM_FI_DEV_PSTATE": nvml.nvmlDeviceGetPerformanceState(handle)}


def typed_value(value: object, value_type: int) -> float:
    """The member of NVML's value union that ``value_type`` (an ``nvmlValueType_t``) says is set."""
    kinds = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return float(getattr(value, kinds.get(value_type, "ullVal")))


def field_values(nvml: Nvml, handle: Handle, wanted: Mapping[int, str], filled_only: bool = False) -> Values:
    """Fields of NVML's field-values API, in one call; each value carries its own return code, a failed one is
    left out. ``filled_only`` also leaves out a value NVML did not fill in (no timestamp, a double): DCGM's
    workaround for NVML leaving ECC and page retirement fields unset when ECC is off."""
    got: Values = {}
    for raw in nvml.nvmlDeviceGetFieldValues(handle, list(wanted)):
        if raw.nvmlReturn != nvml.NVML_SUCCESS or (filled_only and not raw.timestamp and raw.valueType == 0):
            continue
        got[wanted[raw.fieldId]] = typed_value(raw.value, raw.valueType)
    return got


def _memory_temp(nvml: Nvml, handle: Handle) -> Values:
    return field_values(nvml, handle, {nvml.NVML_FI_DEV_MEMORY_TEMP: "DCGM_FI_DEV_MEMORY_TEMP"})


def _violations(nvml: Nvml, handle: Handle) -> Values:
    """Nanoseconds the clocks were held down by each policy since the driver loaded: DCGM reads these fields."""
    return field_values(
        nvml,
        handle,
        {
            nvml.NVML_FI_DEV_PERF_POLICY_POWER: "DCGM_FI_DEV_POWER_VIOLATION",
            nvml.NVML_FI_DEV_PERF_POLICY_THERMAL: "DCGM_FI_DEV_THERMAL_VIOLATION",
            nvml.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST: "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
            nvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT: "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
            nvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION: "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
            nvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY: "DCGM_FI_DEV_RELIABILITY_VIOLATION",
        },
    )


def _retired_pages(nvml: Nvml, handle: Handle) -> Values:
    """Pages retired for single- and double-bit ECC errors, and 1 while a retirement is pending. GPUs that remap
    rows instead (A100 and newer: ``DCGM_FI_DEV_*_REMAPPED_ROWS``) answer NotSupported."""
    wanted = {
        nvml.NVML_FI_DEV_RETIRED_SBE: "DCGM_FI_DEV_RETIRED_SBE",
        nvml.NVML_FI_DEV_RETIRED_DBE: "DCGM_FI_DEV_RETIRED_DBE",
        nvml.NVML_FI_DEV_RETIRED_PENDING: "DCGM_FI_DEV_RETIRED_PENDING",
    }
    return field_values(nvml, handle, wanted, filled_only=True)


def _nvlink_errors(nvml: Nvml, handle: Handle) -> Values:
    """Error counts of all links together, the fields DCGM reads for its ``*_COUNT_TOTAL`` fields."""
    wanted = {
        nvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        nvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        nvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        nvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    }
    return field_values(nvml, handle, wanted)


def _pcie_throughput(nvml: Nvml, handle: Handle) -> Values:
    # NVML counts the bytes of a 20 ms interval inside each call (so each call takes that long) and answers KB/s.
    # DCGM answers these two fields NotSupported and points to DCGM_FI_PROF_PCIE_TX/RX_BYTES (served from GPM).
    return {
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES),
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES),
    }


def _vgpu_license(nvml: Nvml, handle: Handle) -> Values:
    """1 while the GPU holds an active vGPU licence; 0 when not, or when the GPU takes no licence (as DCGM)."""
    name = "DCGM_FI_DEV_VGPU_LICENSE_STATUS"
    features = nvml.nvmlDeviceGetGridLicensableFeatures(handle)
    if not features.isGridLicenseSupported:
        return {name: 0}
    for feature in features.gridLicensableFeatures[: features.licensableFeaturesCount]:
        if feature.featureCode == nvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU:
            return {name: 1 if feature.featureState > 0 else 0}
    return {}


READINGS: dict[str, Reading] = {
    "utilization": _utilization,
    "encoder": _encoder,
    "decoder": _decoder,
    "memory": _memory,
    "power": _power,
    "power_limit": _power_limit,
    "energy": _energy,
    "gpu_temp": _gpu_temp,
    "sm_clock": _sm_clock,
    "mem_clock": _mem_clock,
    "fan": _fan,
    "pcie_replay": _pcie_replay,
    "remapped_rows": _remapped_rows,
    "ecc": _ecc,
    "clock_events": _clock_events,
    "pstate": _pstate,
    "field_values": _memory_temp,
    "violations": _violations,
    "retired_pages": _retired_pages,
    "nvlink_errors": _nvlink_errors,
    "pcie_throughput": _pcie_throughput,
    "vgpu_license": _vgpu_license,
}
