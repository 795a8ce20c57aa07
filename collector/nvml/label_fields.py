"""Fields a counters file can turn into labels (type ``label``), and the NVML call that gives each.

dcgm-exporter puts a label field on every series of a GPU under the field's own name (``DCGM_FI_DEV_SERIAL="..."``)
and leaves the label out where DCGM has no value. System-wide ones are read when NVML starts; per-GPU ones when a
counters file first asks for them, and then kept: none of them changes while the driver is loaded.
"""

from __future__ import annotations

from collections.abc import Callable

from collector.nvml.api import Handle, Nvml, Text

SYSTEM_LABELS: dict[str, Callable[[Nvml], Text]] = {
    "DCGM_FI_DRIVER_VERSION": lambda nvml: nvml.nvmlSystemGetDriverVersion(),
    "DCGM_FI_NVML_VERSION": lambda nvml: nvml.nvmlSystemGetNVMLVersion(),
}

# The words DCGM turns NVML's brand numbers into (DcgmCacheManager, "stolen from nvsmi"); any other is "Unknown".
_BRANDS = {
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NVIDIA Virtual Applications",
    8: "NVIDIA Virtual PC",
    9: "NVIDIA Virtual Compute Server",
    10: "NVIDIA RTX Virtual Workstation",
    11: "NVIDIA vGaming",
    12: "Quadro RTX",
    13: "NVIDIA RTX",
    14: "NVIDIA",
    15: "GeForce RTX",
    16: "Titan RTX",
}


def _brand(nvml: Nvml, handle: Handle) -> str:
    return _BRANDS.get(int(nvml.nvmlDeviceGetBrand(handle)), "Unknown")


GPU_LABELS: dict[str, Callable[[Nvml, Handle], Text]] = {
    "DCGM_FI_DEV_BRAND": _brand,
    "DCGM_FI_DEV_SERIAL": lambda nvml, h: nvml.nvmlDeviceGetSerial(h),
    "DCGM_FI_DEV_OEM_INFOROM_VER": lambda nvml, h: nvml.nvmlDeviceGetInforomVersion(h, nvml.NVML_INFOROM_OEM),
    "DCGM_FI_DEV_ECC_INFOROM_VER": lambda nvml, h: nvml.nvmlDeviceGetInforomVersion(h, nvml.NVML_INFOROM_ECC),
    "DCGM_FI_DEV_POWER_INFOROM_VER": lambda nvml, h: nvml.nvmlDeviceGetInforomVersion(h, nvml.NVML_INFOROM_POWER),
    "DCGM_FI_DEV_INFOROM_IMAGE_VER": lambda nvml, h: nvml.nvmlDeviceGetInforomImageVersion(h),
    "DCGM_FI_DEV_VBIOS_VERSION": lambda nvml, h: nvml.nvmlDeviceGetVbiosVersion(h),
}

LABEL_FIELDS: frozenset[str] = frozenset(SYSTEM_LABELS) | frozenset(GPU_LABELS)
