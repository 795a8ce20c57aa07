"""Simulated GPUs: a stand-in for the ``pynvml`` module on machines without an NVIDIA GPU.

It answers the NVML calls the reader makes with H200-like values that follow a load curve over time, and says
NotSupported where the real H200 does (fan speed, NVLink on a single GPU). Constants, error classes and structure
types come from the real ``pynvml`` module, which imports without a driver; only the calls are simulated.

Utilization is timed as the H200 showed it: a GPU with a ``period`` is busy for the first ``load x period`` seconds
of every period (a duty-cycled job), else evenly busy at ``load``. NVML's utilization samples each cover one 200 ms
window (``nvmlDeviceGetSamples``, 70 kept); ``nvmlDeviceGetUtilizationRates`` covers only the last 100 ms, so it
aliases with a periodic load as the real one does; GPM reports the busy fraction between its two samples; and each
200 ms window's per-process sample belongs to one process, carrying the window's device utilization.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pynvml

from collector.nvml.api import (
    EventData,
    EventSet,
    FieldValue,
    GpmMetricsGet,
    GpmSample,
    GpmSupport,
    GridLicensableFeatures,
    Handle,
    MemoryInfo,
    Nvml,
    PciInfo,
    ProcessInfo,
    ProcessUtilizationSample,
    Sample,
    UtilizationRates,
)

# Load of GPU ``index`` at time ``t`` (seconds since the simulation started), from 0 (idle) to 1 (full).
LoadCurve = Callable[[int, float], float]

MIB = 1024 * 1024
TOTAL_MIB = 143771  # what an H200 reports
RESERVED_MIB = 569
IDLE_USED_MIB = 0
POWER_IDLE_MW = 76_000
POWER_MAX_MW = 690_000
POWER_LIMIT_MW = 700_000
SAMPLE_PERIOD = 0.2  # seconds: NVML's utilization sample window on the H200 (device and per-process samples)
SAMPLE_BUFFER = 70  # samples NVML keeps per GPU and kind (~14 s on the H200)
POINT_WINDOW = 0.1  # seconds nvmlDeviceGetUtilizationRates covers: what fits the values an H200 gave
POWER_CAPPED = 0.95  # load from which the clocks are held at the power limit (SW power cap)
LOW_UTIL = 0.05  # load up to which the GPU idles at low clocks
NVLINK_KIB_PER_S = 18e6  # one link's data both ways at full load (NVLink 4 carries up to 50 GB/s a link)
NVLINK_TX_SHARE = 0.5
ALL_LINKS = 0xFFFFFFFF


def default_load(index: int, t: float) -> float:
    """Each GPU rises and falls on a slow wave of its own, so dashboards show movement."""
    return max(0.0, min(1.0, 0.5 + 0.48 * math.sin(2 * math.pi * t / 120.0 + index * 1.3)))


def _always(index: int) -> bool:
    return True


@dataclass(frozen=True)
class _Device:
    """What a simulated handle names: a GPU, or one MIG GPU instance of it."""

    index: int
    gpu_instance: int | None = None
    # whether GPU ``index`` is bound to the driver now; the handle of one that is not answers GpuIsLost
    bound: Callable[[int], bool] = field(default=_always, compare=False, repr=False)


def _device(handle: Handle) -> _Device:
    if not isinstance(handle, _Device):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # what NVML answers a handle it did not give
    if not handle.bound(handle.index):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
    return handle


@dataclass
class _Gpu:
    device: _Device
    energy_mj: float = 0.0
    last_t: float = 0.0
    # what NVML counts since the driver loaded, brought up to date by _counters: ns of clocks held down by the power
    # cap and by low utilization, KiB each NVLink link moved each way
    capped_ns: float = 0.0
    low_util_ns: float = 0.0
    link_kib: float = 0.0
    counted_t: float = 0.0


@dataclass
class _GpmSample:
    device: _Device | None = None  # None until a sample is taken into it
    t: float = 0.0


def _gpm_sample(sample: GpmSample) -> _GpmSample:
    if not isinstance(sample, _GpmSample):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return sample


@dataclass
class _GpmMetric:
    metricId: int = 0
    nvmlReturn: int = 0
    value: float = 0.0


class GpmMetricsRequest:
    """Plain stand-in for ``c_nvmlGpmMetricsGet_t``, for NVML stand-ins whose GPM samples are not ctypes pointers."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1 = self.sample2 = GpmSample(None)  # the caller sets both
        self.metrics = [_GpmMetric() for _ in range(210)]


class SimulatedNvml:
    """``pynvml``-shaped: module constants and errors pass through, calls answer from the load curve."""

    c_nvmlGpmMetricsGet_t = GpmMetricsRequest
    SIMULATED = True  # what the reader's start-up line says it started: no driver is there

    def __init__(
        self,
        count: int,
        load: LoadCurve = default_load,
        clock: Callable[[], float] = time.monotonic,
        driver_version: str = "580.159.04",
        mig: dict[int, list[str]] | None = None,
        processes: dict[int, dict[int, float]] | None = None,
        wall_clock: Callable[[], float] = time.time,
        period: float | dict[int, float] = 0.0,
        absent: Callable[[int, float], bool] | None = None,
        nvlink: int = 0,
    ) -> None:
        """``mig``: GPU index → MIG profiles ("1g.18gb") of its instances. ``processes``: GPU index → {pid: share of
        the GPU's time}; such a GPU's load is the sum of the shares, and NVML's per-process samples follow them.
        ``period``: seconds of one busy-then-idle cycle, for every GPU or per GPU index (0: evenly busy).
        ``absent(index, t)``: whether GPU ``index`` is unbound from the driver ``t`` seconds into the simulation.
        As with the real driver, NVML enumerates the bound GPUs when it starts (``nvmlInit``) and the handle of a
        GPU unbound since answers GpuIsLost; ``present_gpus`` is what the driver's sysfs directory would list.
        ``nvlink``: active NVLink links per GPU, as on an HGX board (18); 0, the default, is a PCIe H200, which
        answers every NVLink call NotSupported."""
        self._count = count
        self._load = load
        self._period = period
        self._mig = mig or {}
        self._processes = processes or {}
        self._wall_start = wall_clock()
        self._clock = clock
        self._start = clock()
        self._driver = driver_version
        self._absent = absent
        self._links = nvlink
        self._gpus = [_Gpu(_Device(i, bound=self._bound)) for i in range(count)]
        self._enumerated = [i for i in range(count) if self._bound(i)]

    def __getattr__(self, name: str) -> Any:
        value = getattr(pynvml, name)
        if callable(value) and not isinstance(value, type):
            # What a driver without this entry point answers.
            def missing(*args: Any, **kwargs: Any) -> Any:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

            return missing
        return value

    def uuids(self) -> list[str]:
        """The UUID of every simulated GPU, as a device plugin would hand them to pods."""
        return [_uuid(gpu.device) for gpu in self._gpus]

    # -- helpers -----------------------------------------------------------------------------------------------

    def _now(self) -> float:
        return self._clock() - self._start

    def _bound(self, index: int) -> bool:
        return self._absent is None or not self._absent(index, self._now())

    def present_gpus(self) -> frozenset[str]:
        """PCI bus IDs of the GPUs bound to the driver now (``gpu_watch.GpuPresence``)."""
        return frozenset(_bus_id(i) for i in range(self._count) if self._bound(i))

    def load(self, device: _Device, at: float | None = None) -> float:
        """The busy fraction the load curve asks of this GPU (or MIG instance) at ``at`` (default: now)."""
        gi = device.gpu_instance
        if device.index in self._processes and gi is None:
            return min(1.0, sum(self._processes[device.index].values()))
        # MIG instances follow the GPU's curve, each shifted in time so they differ
        return self._load(device.index, (self._now() if at is None else at) + 17.0 * (gi or 0))

    def busy(self, device: _Device, start: float, end: float) -> float:
        """The fraction of [start, end) (simulation seconds) the GPU was busy."""
        if end <= start:
            return self.load(device, start)
        level = self.load(device, (start + end) / 2)
        period = self._period.get(device.index, 0.0) if isinstance(self._period, dict) else self._period
        if period <= 0:
            return level
        on = level * period

        def busy_until(t: float) -> float:
            cycles, into = divmod(t, period)
            return cycles * on + min(into, on)

        return (busy_until(end) - busy_until(start)) / (end - start)

    def _window(self, device: _Device, k: int) -> int:
        """Busy percentage of sample window ``k``, as NVML rounds it."""
        return round(100 * self.busy(device, k * SAMPLE_PERIOD, (k + 1) * SAMPLE_PERIOD))

    def _stamp(self, k: int) -> int:
        """NVML's timestamp (µs since the epoch) of window ``k``: the moment it closed."""
        return int((self._wall_start + (k + 1) * SAMPLE_PERIOD) * 1e6)

    def _kept_after(self, last_seen: int) -> list[tuple[int, int]]:
        """(window, timestamp) of the closed windows NVML still keeps that are newer than ``last_seen``, newest first.

        Windows before the simulation started (k < 0) are the history a GPU that was already running keeps."""
        closed = math.floor(self._now() / SAMPLE_PERIOD)
        kept = []
        for k in range(closed - 1, closed - 1 - SAMPLE_BUFFER, -1):
            stamp = self._stamp(k)
            if stamp <= last_seen:
                break
            kept.append((k, stamp))
        return kept

    @staticmethod
    def _not_supported() -> pynvml.NVMLError:
        return pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    # -- system and enumeration ------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enumerated = [i for i in range(self._count) if self._bound(i)]

    def nvmlShutdown(self) -> None:
        return None

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self._enumerated)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        if not 0 <= index < len(self._enumerated):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        handle = Handle(self._gpus[self._enumerated[index]].device)
        _device(handle)  # a GPU unbound since nvmlInit answers GpuIsLost
        return handle

    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        return _uuid(_device(handle))

    def nvmlDeviceGetName(self, handle: Handle) -> str:
        device = _device(handle)
        gi = device.gpu_instance
        return "NVIDIA H200" if gi is None else f"NVIDIA H200 MIG {self._mig[device.index][gi - 1]}"

    def nvmlDeviceGetMinorNumber(self, handle: Handle) -> int:
        return _device(handle).index

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> PciInfo:
        return SimpleNamespace(busId=_bus_id(_device(handle).index))

    # -- readings --------------------------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: Handle) -> UtilizationRates:
        now = self._now()
        load = self.busy(_device(handle), now - POINT_WINDOW, now)
        return SimpleNamespace(gpu=round(100 * load), memory=round(38 * load))

    def nvmlDeviceGetSamples(self, handle: Handle, sampling_type: int, last_seen: int) -> tuple[int, list[Sample]]:
        # memory-controller activity as the H200 showed it under a GEMM (38 % at full load); no video engines
        scale = {
            pynvml.NVML_GPU_UTILIZATION_SAMPLES: 1.0,
            pynvml.NVML_MEMORY_UTILIZATION_SAMPLES: 0.38,
            pynvml.NVML_ENC_UTILIZATION_SAMPLES: 0.0,
            pynvml.NVML_DEC_UTILIZATION_SAMPLES: 0.0,
        }
        if sampling_type not in scale:
            raise self._not_supported()
        device = _device(handle)
        samples: list[Sample] = [
            SimpleNamespace(
                timeStamp=stamp,
                sampleValue=SimpleNamespace(uiVal=round(scale[sampling_type] * self._window(device, k))),
            )
            for k, stamp in self._kept_after(last_seen)
        ]
        if not samples:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, samples[::-1]

    def nvmlDeviceGetEncoderUtilization(self, handle: Handle) -> list[int]:
        return [0, 167000]

    def nvmlDeviceGetDecoderUtilization(self, handle: Handle) -> list[int]:
        return [0, 167000]

    def nvmlDeviceGetMemoryInfo(self, handle: Handle, version: int | None = None) -> MemoryInfo:
        device = _device(handle)
        gi = device.gpu_instance
        total_mib = TOTAL_MIB if gi is None else _profile_mib(self._mig[device.index][gi - 1])
        used = (IDLE_USED_MIB + round(self.load(device) * total_mib * 0.48)) * MIB
        total, reserved = total_mib * MIB, (RESERVED_MIB if gi is None else 0) * MIB
        return SimpleNamespace(total=total, reserved=reserved, used=used, free=total - reserved - used)

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        return round(POWER_IDLE_MW + self.load(_device(handle)) * (POWER_MAX_MW - POWER_IDLE_MW))

    def nvmlDeviceGetPowerManagementLimit(self, handle: Handle) -> int:
        return POWER_LIMIT_MW

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Handle) -> int:
        gpu, now = self._gpus[_device(handle).index], self._now()
        gpu.energy_mj += self.nvmlDeviceGetPowerUsage(handle) * max(0.0, now - gpu.last_t)
        gpu.last_t = now
        return int(gpu.energy_mj)

    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:
        return round(28 + 40 * self.load(_device(handle)))

    def nvmlDeviceGetClockInfo(self, handle: Handle, clock_type: int) -> int:
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return 3201
        return round(345 + self.load(_device(handle)) * (1980 - 345))

    def nvmlDeviceGetFanSpeed(self, handle: Handle) -> int:
        raise self._not_supported()  # the H200 has no fan of its own

    def nvmlDeviceGetNvLinkState(self, handle: Handle, link: int) -> int:
        _device(handle)
        if not self._links:
            raise self._not_supported()  # a PCIe H200, like the one imitated, has no NVLink
        if link >= self._links:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(pynvml.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetPcieReplayCounter(self, handle: Handle) -> int:
        return 0

    def nvmlDeviceGetRemappedRows(self, handle: Handle) -> tuple[int, int, int, int]:
        return (0, 0, 0, 0)

    def nvmlDeviceGetTotalEccErrors(self, handle: Handle, bit_type: int, counter_type: int) -> int:
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Handle) -> int:
        load = self.load(_device(handle))
        if load <= LOW_UTIL:
            return int(pynvml.nvmlClocksEventReasonGpuIdle)
        return int(pynvml.nvmlClocksEventReasonSwPowerCap) if load >= POWER_CAPPED else 0

    def nvmlDeviceGetPerformanceState(self, handle: Handle) -> int:
        return 0

    def nvmlDeviceGetFieldValues(self, handle: Handle, field_ids: list[int | tuple[int, int]]) -> list[FieldValue]:
        device = _device(handle)
        gpu = self._counters(device)
        stamp = int((self._wall_start + self._now()) * 1e6)
        links = range(self._links)
        per_link = {
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: gpu.link_kib * NVLINK_TX_SHARE,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: gpu.link_kib * (1 - NVLINK_TX_SHARE),
        }
        known: dict[int, float] = {
            pynvml.NVML_FI_DEV_MEMORY_TEMP: round(30 + 35 * self.load(device)),
            pynvml.NVML_FI_DEV_PERF_POLICY_POWER: gpu.capped_ns,
            pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL: 0,
            pynvml.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST: 0,
            pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT: 0,
            pynvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION: gpu.low_util_ns,
            pynvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY: 0,
        }
        if links:
            known.update(
                dict.fromkeys(
                    [
                        pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
                        pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
                        pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
                        pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
                    ],
                    0,
                )
            )
        out: list[FieldValue] = []
        for requested in field_ids:
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            value: float | None = known.get(field_id)
            if field_id in per_link and links:
                # scope: one link, or 0xFFFFFFFF for all of them together
                value = per_link[field_id] * (len(links) if scope == ALL_LINKS else 1 if scope in links else 0)
            # retired pages: an H200 remaps rows instead, and NVML answers NotSupported (as without NVLink)
            out.append(_field_value(field_id, scope, stamp, value))
        return out

    # -- identity, read as label fields: shaped like an H200's ------------------------------------------------

    def nvmlSystemGetNVMLVersion(self) -> str:
        return f"13.{self._driver}"  # the CUDA major version the driver supports, then the driver's version

    def nvmlDeviceGetBrand(self, handle: Handle) -> int:
        _device(handle)
        return int(pynvml.NVML_BRAND_NVIDIA)

    def nvmlDeviceGetSerial(self, handle: Handle) -> str:
        return str(1654124000000 + _device(handle).index)

    def nvmlDeviceGetInforomVersion(self, handle: Handle, inforom_object: int) -> str:
        _device(handle)
        versions = {pynvml.NVML_INFOROM_OEM: "2.1", pynvml.NVML_INFOROM_ECC: "7.16"}
        if inforom_object not in versions:
            raise self._not_supported()  # the power management object: "N/A" on Hopper boards
        return versions[inforom_object]

    def nvmlDeviceGetInforomImageVersion(self, handle: Handle) -> str:
        _device(handle)
        return "G525.0225.00.03"

    def nvmlDeviceGetVbiosVersion(self, handle: Handle) -> str:
        _device(handle)
        return "96.00.B5.00.02"

    # -- PCIe, licences, peers ----------------------------------------------------------------------------------

    def nvmlDeviceGetPcieThroughput(self, handle: Handle, counter: int) -> int:
        """KB/s, as the GPM PCIe rates above scaled by load (the real call counts for 20 ms; this one does not wait)."""
        mib_per_s = {pynvml.NVML_PCIE_UTIL_TX_BYTES: 3.0, pynvml.NVML_PCIE_UTIL_RX_BYTES: 5.0}
        if counter not in mib_per_s:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return round(mib_per_s[counter] * 1024 * self.load(_device(handle)))

    def nvmlDeviceGetGridLicensableFeatures(self, handle: Handle) -> GridLicensableFeatures:
        _device(handle)  # a GPU outside vGPU takes no licence: DCGM reports 0
        return SimpleNamespace(isGridLicenseSupported=0, licensableFeaturesCount=0, gridLicensableFeatures=[])

    def nvmlDeviceGetP2PStatus(self, handle: Handle, peer: Handle, caps_index: int) -> int:
        ours, theirs = _device(handle), _device(peer)
        if caps_index != pynvml.NVML_P2P_CAPS_INDEX_NVLINK or ours.index == theirs.index:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(pynvml.NVML_P2P_STATUS_OK if self._links else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED)

    def _counters(self, device: _Device) -> _Gpu:
        """Brings the GPU's counters up to now, as the driver keeps them whether or not anyone asks."""
        gpu, now = self._gpus[device.index], self._now()
        seconds, load = max(0.0, now - gpu.counted_t), self.busy(device, gpu.counted_t, now)
        gpu.capped_ns += seconds * 1e9 if load >= POWER_CAPPED else 0
        gpu.low_util_ns += seconds * 1e9 if load <= LOW_UTIL else 0
        gpu.link_kib += seconds * load * NVLINK_KIB_PER_S
        gpu.counted_t = now
        return gpu

    # -- XID events ------------------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> EventSet:
        return EventSet(SimpleNamespace())

    def nvmlDeviceRegisterEvents(self, handle: Handle, types: int, event_set: EventSet) -> None:
        return None

    def nvmlEventSetWait(self, event_set: EventSet, timeout_ms: int) -> EventData:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: EventSet) -> None:
        return None

    # -- GPM -------------------------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, handle: Handle) -> GpmSupport:
        return SimpleNamespace(isSupportedDevice=1)

    def nvmlGpmSampleAlloc(self) -> GpmSample:
        return GpmSample(_GpmSample())

    def nvmlGpmSampleFree(self, sample: GpmSample) -> None:
        return None

    def nvmlGpmSampleGet(self, handle: Handle, sample: GpmSample) -> GpmSample:
        taken = _gpm_sample(sample)
        taken.device, taken.t = _Device(_device(handle).index), self._now()
        return sample

    def nvmlGpmMigSampleGet(self, handle: Handle, gpu_instance_id: int, sample: GpmSample) -> GpmSample:
        taken = _gpm_sample(sample)
        taken.device, taken.t = _Device(_device(handle).index, gpu_instance_id), self._now()
        return sample

    def nvmlGpmMetricsGet(self, request: GpmMetricsGet) -> GpmMetricsGet:
        first, second = _gpm_sample(request.sample1), _gpm_sample(request.sample2)
        if second.device is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        load = self.busy(second.device, first.t, second.t)
        # Percentages as an H200 gave them under a bf16 GEMM, scaled by load.
        per_load = {
            pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 99.0,
            pynvml.NVML_GPM_METRIC_SM_UTIL: 95.6,
            pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 14.1,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 92.8,
            pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL: 92.8,
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 17.1,
            pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 3.0,
            pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 5.0,
        }
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            if metric.metricId in (
                pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
                pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
            ):
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            metric.nvmlReturn = pynvml.NVML_SUCCESS
            metric.value = per_load.get(metric.metricId, 0.0) * load
        return request

    # -- MIG -------------------------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: Handle) -> list[int]:
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if _device(handle).index in self._mig else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, index: int) -> Handle:
        parent = _device(handle)
        if index >= len(self._mig.get(parent.index, [])):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return Handle(replace(parent, gpu_instance=index + 1))

    def nvmlDeviceGetGpuInstanceId(self, handle: Handle) -> int:
        gi = _device(handle).gpu_instance
        if gi is None:  # a whole GPU, not a MIG device
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gi

    # -- processes: NVML keeps one sample per ~200 ms window, owned by the process that held the GPU ----------

    def _window_owner(self, gpu: int, k: int) -> int | None:
        """Which process held the GPU in window ``k``: spread by share with a low-discrepancy sequence."""
        position = (k * 0.6180339887) % 1.0
        for pid, share in self._processes.get(gpu, {}).items():
            if position < share:
                return pid
            position -= share
        return None

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[ProcessInfo]:
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=(2048 + round(share * 40_000)) * MIB)
            for pid, share in self._processes.get(_device(handle).index, {}).items()
        ]

    def nvmlDeviceGetProcessUtilization(self, handle: Handle, last_seen: int) -> list[ProcessUtilizationSample]:
        """The newest sample of each process, as NVML answers: a slower poll misses the ones in between."""
        device = _device(handle)
        latest: dict[int, ProcessUtilizationSample] = {}
        for k, stamp in self._kept_after(last_seen):
            pid = self._window_owner(device.index, k)
            if pid is not None and pid not in latest:
                util = self._window(device, k)
                latest[pid] = SimpleNamespace(
                    pid=pid, timeStamp=stamp, smUtil=util, memUtil=round(0.38 * util), encUtil=0, decUtil=0
                )
        if not latest:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return list(latest.values())


def _field_value(field_id: int, scope: int, stamp: int, value: float | None) -> FieldValue:
    """One of nvmlDeviceGetFieldValues' answers: unsigned long long, or NotSupported with no value."""
    code = pynvml.NVML_SUCCESS if value is not None else pynvml.NVML_ERROR_NOT_SUPPORTED
    number = SimpleNamespace(dVal=0.0, uiVal=0, ulVal=0, ullVal=int(value or 0), sllVal=0, siVal=0, usVal=0)
    return SimpleNamespace(
        fieldId=field_id, scopeId=scope, timestamp=stamp if value is not None else 0, latencyUsec=0,
        valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, nvmlReturn=code, value=number,
    )  # fmt: skip


def _bus_id(index: int) -> str:
    return f"00000000:{0x19 + 0x10 * index:02X}:00.0"


def _uuid(device: _Device) -> str:
    if device.gpu_instance is not None:
        return f"MIG-{uuid.uuid5(uuid.NAMESPACE_DNS, f'simulated-mig-{device.index}-{device.gpu_instance}.gpuscale')}"
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'simulated-gpu-{device.index}.gpuscale')}"


def _profile_mib(profile: str) -> int:
    """ "1g.18gb" → 18432."""
    return int(profile.split(".")[1].removesuffix("gb")) * 1024


if TYPE_CHECKING:
    # mypy checks here that the stand-in answers the calls the collector makes with the types it declares; calls
    # not defined above answer FunctionNotFound through __getattr__, as a driver without them would.
    _conforms: type[Nvml] = SimulatedNvml
