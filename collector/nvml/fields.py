"""The DCGM fields this collector serves, and the reading that gives each.

Names, types and units follow dcgm-exporter so that existing dashboards, alerts and adapter rules keep working.
A *reading* is one NVML call that yields one or more fields (``nvml/readings.py``), or one the reader serves itself (XID
events, GPM, NVLink rates, peer-to-peer status); the reader calls each reading once per device and cycle, and only
for readings whose fields the counters file asks for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from collector.nvml.event_windows import CLOCK_EVENTS_COUNT, XID_COUNT
from collector.nvml.label_fields import LABEL_FIELDS as LABEL_FIELDS

MetricType = Literal["gauge", "counter"]
Values = dict[str, float]

MIB = 1024 * 1024

NVLINK_LINKS = 18  # DCGM names per-link NVLink fields for links 0-17
NVLINK_TOTAL = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"


def nvlink_field(link: int) -> str:
    return f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{link}"


P2P_FIELD = "DCGM_EXP_P2P_STATUS"


@dataclass(frozen=True)
class Field:
    name: str
    type: MetricType
    help: str
    reading: str


# Present only on GPUs with at least one active NVLink link: a lone H200 answers GPM's NVLink rates with 0.
NVLINK_FIELDS = frozenset(
    {
        NVLINK_TOTAL,
        *(nvlink_field(n) for n in range(NVLINK_LINKS)),
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    }
)

# Readings of values that change slowly or only count rare events, and readings NVML answers slowly: read every
# ``--slow-fields-interval`` (10 s), their last values served in between. On an H200 the energy counter costs
# ~3.1 ms of CPU per call, more than all point readings together, and PCIe throughput holds the caller ~20 ms per
# direction while NVML counts the bytes of a 20 ms interval (bench/nvml_costs.py; docs/collector-bench.md).
SLOW_READINGS = frozenset(
    {
        "energy",
        "power_limit",
        "pcie_replay",
        "ecc",
        "remapped_rows",
        "retired_pages",
        "nvlink_errors",
        "vgpu_license",
        "p2p",
        "pcie_throughput",
    }
)

# What dcgm-exporter serves from DCGM alone, and why NVML cannot give it: named when a counters file asks for it.
WITHOUT_DCGM: dict[str, str] = {
    "DCGM_EXP_GPU_HEALTH_STATUS": "DCGM's health watches need the DCGM host engine",
    "DCGM_FI_DEV_NVSWITCH_": "NVSwitch fields come from DCGM's NVSwitch module; NVML reads GPUs",
    "DCGM_FI_DEV_CPU_": "CPU fields come from DCGM's CPU module; NVML reads GPUs",
}


def without_dcgm(name: str) -> str | None:
    """Why NVML cannot serve ``name`` (a field or a prefix of fields above), or None."""
    return next(
        (why for key, why in WITHOUT_DCGM.items() if name == key or (key.endswith("_") and name.startswith(key))), None
    )


# Readings that are not plain NVML calls per cycle: the reader serves these itself.
XID = "xid"
GPM = "gpm"
NVLINK = "nvlink"  # throughput rates from two readings (nvlink.py)
P2P = "p2p"  # peer-to-peer status between each pair of GPUs (nvlink.py)


@dataclass(frozen=True)
class SampledReading:
    """A utilization NVML also keeps as a buffer of samples, each the busy percentage of its own short window."""

    field: str
    sampling_type: str  # the pynvml constant naming the buffer (nvmlSamplingType_t)
    point: str  # the READINGS entry giving the instantaneous value, for GPUs that keep no samples
    # Averaged over the collection interval and read every cycle (the GPU's utilization, what HPAs scale on), or
    # else over ``--engine-utilization-interval`` and read once per that interval: NVML answers each read of a
    # sample buffer in ~2.5 ms of CPU on an H200 whatever it returns, the largest cost of a cycle.
    every_cycle: bool


# One reading per field, so that a failing buffer costs only its own series. See utilization.py for why.
SAMPLED_READINGS: dict[str, SampledReading] = {
    "gpu_util": SampledReading("DCGM_FI_DEV_GPU_UTIL", "NVML_GPU_UTILIZATION_SAMPLES", "utilization", True),
    "mem_copy_util": SampledReading(
        "DCGM_FI_DEV_MEM_COPY_UTIL", "NVML_MEMORY_UTILIZATION_SAMPLES", "utilization", False
    ),
    "enc_util": SampledReading("DCGM_FI_DEV_ENC_UTIL", "NVML_ENC_UTILIZATION_SAMPLES", "encoder", False),
    "dec_util": SampledReading("DCGM_FI_DEV_DEC_UTIL", "NVML_DEC_UTILIZATION_SAMPLES", "decoder", False),
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


def _violation(policy: str, cause: str) -> tuple[str, MetricType, str, str]:
    return f"DCGM_FI_DEV_{policy}_VIOLATION", "counter", f"Throttling duration due to {cause} (in ns).", "violations"


def _nvlink_errors(kind: str, what: str) -> tuple[str, MetricType, str, str]:
    return f"DCGM_FI_DEV_NVLINK_{kind}_ERROR_COUNT_TOTAL", "counter", f"Total number of NVLink {what}.", "nvlink_errors"


_RP = "retired_pages"
_PCIE = "pcie_throughput"


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
        _f(NVLINK_TOTAL, "counter", "NVLink throughput of all links, both directions (in MB/s, as DCGM).", NVLINK),
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
        *(
            _f(nvlink_field(n), "counter", f"NVLink link {n} throughput, both directions (in MB/s, as DCGM).", NVLINK)
            for n in range(NVLINK_LINKS)
        ),
        _f(*_violation("POWER", "power constraints")),
        _f(*_violation("THERMAL", "thermal constraints")),
        _f(*_violation("SYNC_BOOST", "sync-boost constraints")),
        _f(*_violation("BOARD_LIMIT", "board limit constraints")),
        _f(*_violation("LOW_UTIL", "low utilization")),
        _f(*_violation("RELIABILITY", "reliability constraints")),
        _f("DCGM_FI_DEV_RETIRED_SBE", "counter", "Total number of retired pages due to single-bit errors.", _RP),
        _f("DCGM_FI_DEV_RETIRED_DBE", "counter", "Total number of retired pages due to double-bit errors.", _RP),
        _f("DCGM_FI_DEV_RETIRED_PENDING", "counter", "Whether pages are pending retirement (1) or not (0).", _RP),
        _f("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "gauge", "PCIe transmit throughput over 20 ms (in KB/s).", _PCIE),
        _f("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "gauge", "PCIe receive throughput over 20 ms (in KB/s).", _PCIE),
        _f(*_nvlink_errors("CRC_FLIT", "flow-control CRC errors")),
        _f(*_nvlink_errors("CRC_DATA", "data CRC errors")),
        _f(*_nvlink_errors("REPLAY", "retries")),
        _f(*_nvlink_errors("RECOVERY", "recovery errors")),
        _f("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU license status (1 licensed).", "vgpu_license"),
        _f(CLOCK_EVENTS_COUNT, "counter", "Clock events in the last window, by reason.", "clock_events"),
        _f(XID_COUNT, "counter", "XID errors in the last window, by XID.", XID),
        _f(P2P_FIELD, "gauge", "Peer-to-peer status over NVLink to each other GPU (0 OK).", P2P),
    ]
}
