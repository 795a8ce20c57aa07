"""The DCGM fields this collector serves, and the NVML call that gives each.

Names, types and units follow dcgm-exporter so that existing dashboards, alerts and adapter rules keep working.
A *reading* is one NVML call that yields one or more fields; the reader calls each reading once per device and
cycle, and only for readings whose fields the counters file asks for. A reading leaves out a field the device
does not support (a per-value NotSupported); when the whole call is NotSupported it raises, and the reader marks
all its fields unsupported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .nvml_api import Handle, Nvml

MetricType = Literal["gauge", "counter"]
Values = dict[str, float]
Reading = Callable[[Nvml, Handle], Values]

MIB = 1024 * 1024


@dataclass(frozen=True)
class Field:
    name: str
    type: MetricType
    help: str
    reading: str


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
    return {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)}


def _pstate(nvml: Nvml, handle: Handle) -> Values:
    return {"DCGM_FI_DEV_PSTATE": nvml.nvmlDeviceGetPerformanceState(handle)}


def typed_value(value: object, value_type: int) -> float:
    """The member of NVML's value union that ``value_type`` (an ``nvmlValueType_t``) says is set."""
    kinds = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return float(getattr(value, kinds.get(value_type, "ullVal")))


def _field_values(nvml: Nvml, handle: Handle) -> Values:
    """Fields that only the field-values API gives; each carries its own return code."""
    wanted = {
        nvml.NVML_FI_DEV_MEMORY_TEMP: "DCGM_FI_DEV_MEMORY_TEMP",
        nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: "tx",
        nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: "rx",
    }
    got: Values = {}
    for raw in nvml.nvmlDeviceGetFieldValues(handle, list(wanted)):
        if raw.nvmlReturn == nvml.NVML_SUCCESS:
            got[wanted[raw.fieldId]] = typed_value(raw.value, raw.valueType)
    out = {k: v for k, v in got.items() if k.startswith("DCGM_")}
    if "tx" in got and "rx" in got:
        # NVML counts KiB since the driver loaded; DCGM's total is the sum of both directions in KiB.
        out["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] = got["tx"] + got["rx"]
    return out


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
    "field_values": _field_values,
}

# Present only on GPUs with at least one active NVLink link: a lone H200 answers GPM's NVLink rates with 0.
NVLINK_FIELDS = frozenset(
    {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES"}
)

# Readings of values that change slowly or only count rare events. On an H200 the energy counter alone cost
# ~3.4 ms of CPU per call, more than all other readings together, so these are read every few cycles and their
# last values served in between.
SLOW_READINGS = frozenset({"energy", "power_limit", "pcie_replay", "ecc", "remapped_rows"})

# Readings that are not plain NVML calls per cycle: the reader serves these itself.
XID = "xid"
GPM = "gpm"


@dataclass(frozen=True)
class SampledReading:
    """A utilization NVML also keeps as a buffer of samples, each the busy percentage of its own short window."""

    field: str
    sampling_type: str  # the pynvml constant naming the buffer (nvmlSamplingType_t)
    point: str  # the READINGS entry giving the instantaneous value, for GPUs that keep no samples


# One reading per field, so that a failing buffer costs only its own series. See utilization.py for why.
SAMPLED_READINGS: dict[str, SampledReading] = {
    "gpu_util": SampledReading("DCGM_FI_DEV_GPU_UTIL", "NVML_GPU_UTILIZATION_SAMPLES", "utilization"),
    "mem_copy_util": SampledReading("DCGM_FI_DEV_MEM_COPY_UTIL", "NVML_MEMORY_UTILIZATION_SAMPLES", "utilization"),
    "enc_util": SampledReading("DCGM_FI_DEV_ENC_UTIL", "NVML_ENC_UTILIZATION_SAMPLES", "encoder"),
    "dec_util": SampledReading("DCGM_FI_DEV_DEC_UTIL", "NVML_DEC_UTILIZATION_SAMPLES", "decoder"),
}

# GPM reports percentages (0-100) and MiB/s; DCGM's profiling fields are ratios (0-1) and bytes/s.
GPM_METRICS: dict[str, tuple[str, float]] = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("NVML_GPM_METRIC_GRAPHICS_UTIL", 0.01),
    "DCGM_FI_PROF_SM_ACTIVE": ("NVML_GPM_METRIC_SM_UTIL", 0.01),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("NVML_GPM_METRIC_SM_OCCUPANCY", 0.01),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 0.01),
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": ("NVML_GPM_METRIC_HMMA_TENSOR_UTIL", 0.01),
    "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE": ("NVML_GPM_METRIC_IMMA_TENSOR_UTIL", 0.01),
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE": ("NVML_GPM_METRIC_DFMA_TENSOR_UTIL", 0.01),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("NVML_GPM_METRIC_DRAM_BW_UTIL", 0.01),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": ("NVML_GPM_METRIC_FP64_UTIL", 0.01),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": ("NVML_GPM_METRIC_FP32_UTIL", 0.01),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": ("NVML_GPM_METRIC_FP16_UTIL", 0.01),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", float(MIB)),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", float(MIB)),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", float(MIB)),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", float(MIB)),
}


def _f(name: str, type_: MetricType, help_: str, reading: str) -> Field:
    return Field(name, type_, help_, reading)


FIELDS: dict[str, Field] = {
    f.name: f
    for f in [
        _f("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "gpu_util"),
        _f("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "mem_copy_util"),
        _f("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "enc_util"),
        _f("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "dec_util"),
        _f("DCGM_FI_DEV_FB_TOTAL", "gauge", "Framebuffer memory total (in MiB).", "memory"),
        _f("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "memory"),
        _f("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "memory"),
        _f("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "memory"),
        _f("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power"),
        _f("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W).", "power_limit"),
        _f(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since boot (in mJ).",
            "energy",
        ),
        _f("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "gpu_temp"),
        _f("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "field_values"),
        _f("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock"),
        _f("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "mem_clock"),
        _f("DCGM_FI_DEV_FAN_SPEED", "gauge", "Fan speed (in %).", "fan"),
        _f("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "pcie_replay"),
        _f("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", XID),
        _f(
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for correctable errors.",
            "remapped_rows",
        ),
        _f(
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for uncorrectable errors.",
            "remapped_rows",
        ),
        _f("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed.", "remapped_rows"),
        _f(
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "counter",
            "Total number of single-bit volatile ECC errors.",
            "ecc",
        ),
        _f(
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "counter",
            "Total number of double-bit volatile ECC errors.",
            "ecc",
        ),
        _f(
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
            "counter",
            "Total number of single-bit persistent ECC errors.",
            "ecc",
        ),
        _f(
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
            "counter",
            "Total number of double-bit persistent ECC errors.",
            "ecc",
        ),
        _f(
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            "counter",
            "Total NVLink data throughput of all links, both directions (in KiB).",
            "field_values",
        ),
        _f(
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
            "gauge",
            "Current clock event reasons (bitmask of NVML clocks event reasons).",
            "clock_events",
        ),
        _f("DCGM_FI_DEV_PSTATE", "gauge", "Performance state (P-state) 0-15; 0 is the highest.", "pstate"),
        _f("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", GPM),
        _f("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.", GPM),
        _f(
            "DCGM_FI_PROF_SM_OCCUPANCY",
            "gauge",
            "The ratio of number of warps resident on an SM to the maximum.",
            GPM,
        ),
        _f("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles any tensor pipe is active.", GPM),
        _f(
            "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
            "gauge",
            "Ratio of cycles the HMMA tensor pipe is active.",
            GPM,
        ),
        _f(
            "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
            "gauge",
            "Ratio of cycles the IMMA tensor pipe is active.",
            GPM,
        ),
        _f(
            "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
            "gauge",
            "Ratio of cycles the DFMA tensor pipe is active.",
            GPM,
        ),
        _f("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active.", GPM),
        _f("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "Ratio of cycles the fp64 pipes are active.", GPM),
        _f("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "Ratio of cycles the fp32 pipes are active.", GPM),
        _f("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "Ratio of cycles the fp16 pipes are active.", GPM),
        _f("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "PCIe transmit rate, headers and payload (in B/s).", GPM),
        _f("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "PCIe receive rate, headers and payload (in B/s).", GPM),
        _f("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge", "NVLink transmit rate (in B/s).", GPM),
        _f("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge", "NVLink receive rate (in B/s).", GPM),
    ]
}

# Fields that become a label on every series instead of a series of their own ("label" in the counters file).
LABEL_FIELDS: frozenset[str] = frozenset({"DCGM_FI_DRIVER_VERSION"})
