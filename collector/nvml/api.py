"""The part of ``pynvml`` the collector calls, as a ``Protocol``: every function, constant and result shape it uses.

Production passes the ``pynvml`` module itself (untyped, so mypy takes it as it is); ``--simulate-gpus`` passes a
``SimulatedNvml`` and the tests a replay of a recorded H200, which mypy checks against this declaration. Handles,
event sets and GPM samples are opaque: only the NVML implementation that gave one looks inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NewType, Protocol

Handle = NewType("Handle", object)  # a GPU or a MIG device
EventSet = NewType("EventSet", object)
GpmSample = NewType("GpmSample", object)
Text = str | bytes  # names, UUIDs and versions: bytes from older pynvml releases


class NvmlError(Exception):
    """What the collector reads of ``pynvml.NVMLError``: NVML's return code in ``value``.

    A declaration only: pynvml's errors do not derive from it, so code catches ``nvml.NVMLError``, never this class.
    """

    value: int


class UtilizationRates(Protocol):
    gpu: int
    memory: int


class MemoryInfo(Protocol):  # bytes; the v2 structure
    total: int
    free: int
    used: int
    reserved: int


class PciInfo(Protocol):
    busId: Text


class FieldValue(Protocol):
    fieldId: int
    timestamp: int  # µs since the epoch when NVML took the value; 0 where it left the value unset
    nvmlReturn: int
    valueType: int  # which member of ``value`` (a C union) is set
    value: object


class Sample(Protocol):
    timeStamp: int  # µs
    sampleValue: object  # a C union; the value type comes with the samples


class ProcessInfo(Protocol):
    pid: int
    usedGpuMemory: int | None  # bytes; None where the driver does not account per process


class ProcessUtilizationSample(Protocol):
    pid: int
    timeStamp: int  # µs
    smUtil: int


class EventData(Protocol):
    eventType: int
    eventData: int  # the XID, for an XID event


class GridLicensableFeature(Protocol):
    featureCode: int
    featureState: int


class GridLicensableFeatures(Protocol):
    isGridLicenseSupported: int
    licensableFeaturesCount: int

    @property
    def gridLicensableFeatures(self) -> Sequence[GridLicensableFeature]: ...


class GpmSupport(Protocol):
    isSupportedDevice: int


class GpmMetric(Protocol):
    metricId: int
    nvmlReturn: int
    value: float


class GpmMetricsGet(Protocol):
    """The request ``nvmlGpmMetricsGet`` fills in: the caller sets what to compute between which two samples."""

    version: int
    numMetrics: int
    sample1: GpmSample
    sample2: GpmSample

    @property
    def metrics(self) -> Sequence[GpmMetric]: ...


class Nvml(Protocol):
    NVMLError: type[NvmlError]

    # -- return codes ----------------------------------------------------------------------------------------
    NVML_SUCCESS: int
    NVML_ERROR_UNINITIALIZED: int
    NVML_ERROR_NOT_SUPPORTED: int
    NVML_ERROR_NO_PERMISSION: int
    NVML_ERROR_NOT_FOUND: int
    NVML_ERROR_DRIVER_NOT_LOADED: int
    NVML_ERROR_TIMEOUT: int
    NVML_ERROR_FUNCTION_NOT_FOUND: int
    NVML_ERROR_GPU_IS_LOST: int
    NVML_ERROR_RESET_REQUIRED: int
    NVML_ERROR_UNKNOWN: int

    # -- arguments -------------------------------------------------------------------------------------------
    NVML_DEVICE_MIG_ENABLE: int
    NVML_NVLINK_MAX_LINKS: int
    NVML_FEATURE_ENABLED: int
    NVML_TEMPERATURE_GPU: int
    NVML_CLOCK_SM: int
    NVML_CLOCK_MEM: int
    NVML_SINGLE_BIT_ECC: int
    NVML_DOUBLE_BIT_ECC: int
    NVML_VOLATILE_ECC: int
    NVML_AGGREGATE_ECC: int
    NVML_FI_DEV_MEMORY_TEMP: int
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: int
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: int
    NVML_FI_DEV_PERF_POLICY_POWER: int
    NVML_FI_DEV_PERF_POLICY_THERMAL: int
    NVML_FI_DEV_PERF_POLICY_SYNC_BOOST: int
    NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT: int
    NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION: int
    NVML_FI_DEV_PERF_POLICY_RELIABILITY: int
    NVML_FI_DEV_RETIRED_SBE: int
    NVML_FI_DEV_RETIRED_DBE: int
    NVML_FI_DEV_RETIRED_PENDING: int
    NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: int
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: int
    NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: int
    NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: int
    NVML_PCIE_UTIL_TX_BYTES: int
    NVML_PCIE_UTIL_RX_BYTES: int
    NVML_INFOROM_OEM: int
    NVML_INFOROM_ECC: int
    NVML_INFOROM_POWER: int
    NVML_GRID_LICENSE_FEATURE_CODE_VGPU: int
    NVML_P2P_CAPS_INDEX_NVLINK: int
    nvmlMemory_v2: int
    nvmlEventTypeXidCriticalError: int
    NVML_GPM_METRICS_GET_VERSION: int

    # Looked up by name from the tables in fields.py (SAMPLED_READINGS, GPM_METRICS).
    NVML_GPU_UTILIZATION_SAMPLES: int
    NVML_MEMORY_UTILIZATION_SAMPLES: int
    NVML_ENC_UTILIZATION_SAMPLES: int
    NVML_DEC_UTILIZATION_SAMPLES: int
    NVML_GPM_METRIC_GRAPHICS_UTIL: int
    NVML_GPM_METRIC_SM_UTIL: int
    NVML_GPM_METRIC_SM_OCCUPANCY: int
    NVML_GPM_METRIC_ANY_TENSOR_UTIL: int
    NVML_GPM_METRIC_HMMA_TENSOR_UTIL: int
    NVML_GPM_METRIC_IMMA_TENSOR_UTIL: int
    NVML_GPM_METRIC_DFMA_TENSOR_UTIL: int
    NVML_GPM_METRIC_DRAM_BW_UTIL: int
    NVML_GPM_METRIC_FP64_UTIL: int
    NVML_GPM_METRIC_FP32_UTIL: int
    NVML_GPM_METRIC_FP16_UTIL: int
    NVML_GPM_METRIC_PCIE_TX_PER_SEC: int
    NVML_GPM_METRIC_PCIE_RX_PER_SEC: int
    NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: int
    NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: int

    # -- system and enumeration ------------------------------------------------------------------------------
    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> Text: ...
    def nvmlSystemGetNVMLVersion(self) -> Text: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> Handle: ...
    def nvmlDeviceGetMinorNumber(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetUUID(self, handle: Handle, /) -> Text: ...
    def nvmlDeviceGetName(self, handle: Handle, /) -> Text: ...
    def nvmlDeviceGetPciInfo(self, handle: Handle, /) -> PciInfo: ...
    def nvmlDeviceGetNvLinkState(self, handle: Handle, link: int, /) -> int: ...
    def nvmlDeviceGetP2PStatus(self, handle: Handle, peer: Handle, caps_index: int, /) -> int: ...

    # -- identity read as label fields ----------------------------------------------------------------------
    def nvmlDeviceGetBrand(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetSerial(self, handle: Handle, /) -> Text: ...
    def nvmlDeviceGetInforomVersion(self, handle: Handle, inforom_object: int, /) -> Text: ...
    def nvmlDeviceGetInforomImageVersion(self, handle: Handle, /) -> Text: ...
    def nvmlDeviceGetVbiosVersion(self, handle: Handle, /) -> Text: ...

    # -- readings --------------------------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: Handle, /) -> UtilizationRates: ...
    def nvmlDeviceGetSamples(
        self, handle: Handle, sampling_type: int, last_seen: int, /
    ) -> tuple[int, Sequence[Sample]]: ...
    def nvmlDeviceGetEncoderUtilization(self, handle: Handle, /) -> Sequence[int]: ...  # [percent, period in µs]
    def nvmlDeviceGetDecoderUtilization(self, handle: Handle, /) -> Sequence[int]: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Handle, /, version: int | None = None) -> MemoryInfo: ...
    def nvmlDeviceGetPowerUsage(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetPowerManagementLimit(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int, /) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: Handle, clock_type: int, /) -> int: ...
    def nvmlDeviceGetFanSpeed(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetPcieReplayCounter(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: Handle, /) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Handle, bit_type: int, counter_type: int, /) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetPerformanceState(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetFieldValues(
        self, handle: Handle, field_ids: list[int | tuple[int, int]], /
    ) -> Sequence[FieldValue]: ...  # a (field, scope) pair names a link, or 0xFFFFFFFF for all links
    def nvmlDeviceGetPcieThroughput(self, handle: Handle, counter: int, /) -> int: ...  # KB/s over 20 ms
    def nvmlDeviceGetGridLicensableFeatures(self, handle: Handle, /) -> GridLicensableFeatures: ...

    # -- XID events ------------------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> EventSet: ...
    def nvmlDeviceRegisterEvents(self, handle: Handle, event_types: int, event_set: EventSet, /) -> None: ...
    def nvmlEventSetWait(self, event_set: EventSet, timeout_ms: int, /) -> EventData: ...
    def nvmlEventSetFree(self, event_set: EventSet, /) -> None: ...

    # -- GPM -------------------------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: Handle, /) -> GpmSupport: ...
    def nvmlGpmSampleAlloc(self) -> GpmSample: ...
    def nvmlGpmSampleFree(self, sample: GpmSample, /) -> None: ...
    def nvmlGpmSampleGet(self, handle: Handle, sample: GpmSample, /) -> object: ...
    def nvmlGpmMigSampleGet(self, handle: Handle, gpu_instance_id: int, sample: GpmSample, /) -> object: ...
    def c_nvmlGpmMetricsGet_t(self) -> GpmMetricsGet: ...  # pynvml's structure type, called to make a request
    def nvmlGpmMetricsGet(self, request: GpmMetricsGet, /) -> object: ...

    # -- MIG -------------------------------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: Handle, /) -> Sequence[int]: ...  # [current, pending]
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, index: int, /) -> Handle: ...
    def nvmlDeviceGetGpuInstanceId(self, handle: Handle, /) -> int: ...

    # -- processes -------------------------------------------------------------------------------------------
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle, /) -> Sequence[ProcessInfo]: ...
    def nvmlDeviceGetProcessUtilization(
        self, handle: Handle, last_seen: int, /
    ) -> Sequence[ProcessUtilizationSample]: ...
