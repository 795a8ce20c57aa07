"""DCGM 4.7/4.8's names for the fields this collector serves, and the unit each name carries.

DCGM 4.7 renamed most fields to its naming standard (``DCGM_FI_<domain>_<subsystem>_<property>[_<unit>][_<suffix>]``,
DCGM's ``dcgmlib/dcgm_field_naming.py``) and keeps the old names as deprecated aliases of the same field
(``_DEPRECATED_ALIASES`` in its ``dcgm_fields.py``). Where a field changed unit with its name (utilization from %
to a 0-1 ratio, clocks from MHz to Hz, energy from mJ to J, memory from MiB to bytes, NVLink from MB/s to B/s),
the new name is a field of its own in that unit. dcgm-exporter 4.9.0 (DCGM 4.7) ships these names in its default
collectors; 4.10.0 (DCGM 4.8) renames the profiling PCIe and NVLink rates to ``..._BYTES_PER_SECOND``.

A counters file, ConfigMap or built-in default may name a field either way: the series carries the name given and
the value is in the unit that name carries. The old names keep their old units (``fields.py``).

Read from NVIDIA/DCGM v4.6.0 (commit 72fa3fe): ``_DEPRECATED_ALIASES`` and the naming standard. That snapshot
predates DCGM 4.7, so the unit-changing names (``_HERTZ``, ``_JOULES``, ``_BYTES``, the ``_UTIL_RATIO`` of the
memory copy, encoder and decoder engines, ``FB_CAPACITY_BYTES``) follow dcgm-exporter 4.9.0's and 4.10.0's release
notes and the standard's grammar; the short ``_HZ`` spelling of the clocks is read too.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024
# DCGM's NVLink "MB/s" is KiB/s divided by 1000 (nvml/nvlink.py), so one of its units is 1000 KiB/s
NVLINK_MB = 1000.0 * 1024


@dataclass(frozen=True)
class Spelling:
    """Another name of a field the collector serves: the field, and what to multiply its value by."""

    field: str
    scale: float = 1.0


def _same(field: str) -> Spelling:
    return Spelling(field)


# DCGM 4.7's renames that keep the unit: _DEPRECATED_ALIASES of DCGM v4.6.0, for the fields served here
_ALIASES: dict[str, str] = {
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS": "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS": "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_BOARD_POWER_WATTS": "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS": "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    "DCGM_FI_DEV_GPU_PSTATE": "DCGM_FI_DEV_PSTATE",
    "DCGM_FI_DEV_PCIE_REPLAY_TOTAL": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_XID_ERROR": "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL": "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL": "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_PAGE_RETIRED_PENDING": "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL": "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL": "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILED": "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL": "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    **{f"DCGM_FI_DEV_NVLINK_THROUGHPUT_L{n}": f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{n}" for n in range(18)},
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL": "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL": "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL": "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    # profiling fields were ratios already
    "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_SM_UTIL_RATIO": "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY_RATIO": "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_UTIL_RATIO": "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_FP64_UTIL_RATIO": "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    "DCGM_FI_PROF_FP32_UTIL_RATIO": "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "DCGM_FI_PROF_FP16_UTIL_RATIO": "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    "DCGM_FI_PROF_IMMA_UTIL_RATIO": "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
    "DCGM_FI_PROF_HMMA_UTIL_RATIO": "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
    "DCGM_FI_PROF_DFMA_UTIL_RATIO": "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
    # DCGM 4.8 (dcgm-exporter 4.10.0): the profiling rates, in bytes per second before and after
    "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND": "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND": "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND": "DCGM_FI_PROF_NVLINK_RX_BYTES",
}

# DCGM 4.7's renames that change the unit: new fields, the value scaled from the old field's unit
_RESCALED: dict[str, Spelling] = {
    "DCGM_FI_DEV_GPU_UTIL_RATIO": Spelling("DCGM_FI_DEV_GPU_UTIL", 0.01),
    "DCGM_FI_DEV_MEMORY_COPY_UTIL_RATIO": Spelling("DCGM_FI_DEV_MEM_COPY_UTIL", 0.01),
    "DCGM_FI_DEV_ENC_UTIL_RATIO": Spelling("DCGM_FI_DEV_ENC_UTIL", 0.01),
    "DCGM_FI_DEV_DEC_UTIL_RATIO": Spelling("DCGM_FI_DEV_DEC_UTIL", 0.01),
    "DCGM_FI_DEV_SM_CLOCK_HERTZ": Spelling("DCGM_FI_DEV_SM_CLOCK", 1e6),
    "DCGM_FI_DEV_SM_CLOCK_HZ": Spelling("DCGM_FI_DEV_SM_CLOCK", 1e6),
    "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ": Spelling("DCGM_FI_DEV_MEM_CLOCK", 1e6),
    "DCGM_FI_DEV_MEMORY_CLOCK_HZ": Spelling("DCGM_FI_DEV_MEM_CLOCK", 1e6),
    "DCGM_FI_DEV_MEM_CLOCK_HZ": Spelling("DCGM_FI_DEV_MEM_CLOCK", 1e6),
    "DCGM_FI_DEV_BOARD_ENERGY_JOULES_TOTAL": Spelling("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 0.001),
    "DCGM_FI_DEV_FB_CAPACITY_BYTES": Spelling("DCGM_FI_DEV_FB_TOTAL", MIB),
    "DCGM_FI_DEV_FB_FREE_BYTES": Spelling("DCGM_FI_DEV_FB_FREE", MIB),
    "DCGM_FI_DEV_FB_USED_BYTES": Spelling("DCGM_FI_DEV_FB_USED", MIB),
    "DCGM_FI_DEV_FB_RESERVED_BYTES": Spelling("DCGM_FI_DEV_FB_RESERVED", MIB),
    "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND": Spelling("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", NVLINK_MB),
}

SPELLINGS: dict[str, Spelling] = {**{new: _same(old) for new, old in _ALIASES.items()}, **_RESCALED}

# Label fields (type ``label``): the label carries the name given, the value is the same text
LABEL_SPELLINGS: dict[str, str] = {
    "DCGM_FI_SYSTEM_DRIVER_VERSION": "DCGM_FI_DRIVER_VERSION",
    "DCGM_FI_SYSTEM_NVML_VERSION": "DCGM_FI_NVML_VERSION",
    "DCGM_FI_DEV_GPU_BRAND": "DCGM_FI_DEV_BRAND",
    "DCGM_FI_DEV_BOARD_SERIAL": "DCGM_FI_DEV_SERIAL",
    "DCGM_FI_DEV_INFOROM_OEM_VERSION": "DCGM_FI_DEV_OEM_INFOROM_VER",
    "DCGM_FI_DEV_INFOROM_ECC_VERSION": "DCGM_FI_DEV_ECC_INFOROM_VER",
    "DCGM_FI_DEV_INFOROM_POWER_VERSION": "DCGM_FI_DEV_POWER_INFOROM_VER",
    "DCGM_FI_DEV_INFOROM_IMAGE_VERSION": "DCGM_FI_DEV_INFOROM_IMAGE_VER",
}
