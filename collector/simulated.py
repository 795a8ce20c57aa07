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
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

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


def default_load(index: int, t: float) -> float:
    """Each GPU rises and falls on a slow wave of its own, so dashboards show movement."""
    return max(0.0, min(1.0, 0.5 + 0.48 * math.sin(2 * math.pi * t / 120.0 + index * 1.3)))


@dataclass
class _Gpu:
    index: int
    energy_mj: float = 0.0
    last_t: float = 0.0
    handle: SimpleNamespace = field(default_factory=SimpleNamespace)


class GpmMetricsRequest:
    """Plain stand-in for ``c_nvmlGpmMetricsGet_t``, for NVML stand-ins whose GPM samples are not ctypes pointers."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(210)]


class SimulatedNvml:
    """``pynvml``-shaped: module constants and errors pass through, calls answer from the load curve."""

    c_nvmlGpmMetricsGet_t = GpmMetricsRequest

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
    ) -> None:
        """``mig``: GPU index → MIG profiles ("1g.18gb") of its instances. ``processes``: GPU index → {pid: share of
        the GPU's time}; such a GPU's load is the sum of the shares, and NVML's per-process samples follow them.
        ``period``: seconds of one busy-then-idle cycle, for every GPU or per GPU index (0: evenly busy)."""
        self._count = count
        self._load = load
        self._period = period
        self._mig = mig or {}
        self._processes = processes or {}
        self._wall_start = wall_clock()
        self._clock = clock
        self._start = clock()
        self._driver = driver_version
        self._gpus = [_Gpu(i) for i in range(count)]
        for gpu in self._gpus:
            gpu.handle.index = gpu.index

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
        return [self.nvmlDeviceGetUUID(gpu.handle) for gpu in self._gpus]

    # -- helpers -----------------------------------------------------------------------------------------------

    def _gpu(self, handle: Any) -> _Gpu:
        gpu: _Gpu = self._gpus[handle.index]
        return gpu

    def _now(self) -> float:
        return self._clock() - self._start

    def load(self, handle: Any, at: float | None = None) -> float:
        """The busy fraction the load curve asks of this GPU (or MIG instance) at ``at`` (default: now)."""
        gi = getattr(handle, "gpu_instance", None)
        if handle.index in self._processes and gi is None:
            return min(1.0, sum(self._processes[handle.index].values()))
        # MIG instances follow the GPU's curve, each shifted in time so they differ
        return self._load(handle.index, (self._now() if at is None else at) + 17.0 * (gi or 0))

    def busy(self, handle: Any, start: float, end: float) -> float:
        """The fraction of [start, end) (simulation seconds) the GPU was busy."""
        if end <= start:
            return self.load(handle, start)
        level = self.load(handle, (start + end) / 2)
        period = self._period.get(handle.index, 0.0) if isinstance(self._period, dict) else self._period
        if period <= 0:
            return level
        on = level * period

        def busy_until(t: float) -> float:
            cycles, into = divmod(t, period)
            return cycles * on + min(into, on)

        return (busy_until(end) - busy_until(start)) / (end - start)

    def _window(self, handle: Any, k: int) -> float:
        """Busy percentage of sample window ``k``, as NVML rounds it."""
        return round(100 * self.busy(handle, k * SAMPLE_PERIOD, (k + 1) * SAMPLE_PERIOD))

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
        return None

    def nvmlShutdown(self) -> None:
        return None

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._driver

    def nvmlDeviceGetCount(self) -> int:
        return self._count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < self._count:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpus[index].handle

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        gi = getattr(handle, "gpu_instance", None)
        if gi is not None:
            return f"MIG-{uuid.uuid5(uuid.NAMESPACE_DNS, f'simulated-mig-{handle.index}-{gi}.gpuscale')}"
        return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'simulated-gpu-{handle.index}.gpuscale')}"

    def nvmlDeviceGetName(self, handle: Any) -> str:
        gi = getattr(handle, "gpu_instance", None)
        return "NVIDIA H200" if gi is None else f"NVIDIA H200 MIG {self._mig[handle.index][gi - 1]}"

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return int(handle.index)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return SimpleNamespace(busId=f"00000000:{0x19 + 0x10 * handle.index:02X}:00.0")

    # -- readings --------------------------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        now = self._now()
        load = self.busy(handle, now - POINT_WINDOW, now)
        return SimpleNamespace(gpu=round(100 * load), memory=round(38 * load))

    def nvmlDeviceGetSamples(self, handle: Any, sampling_type: int, last_seen: int) -> tuple[int, list[Any]]:
        # memory-controller activity as the H200 showed it under a GEMM (38 % at full load); no video engines
        scale = {
            pynvml.NVML_GPU_UTILIZATION_SAMPLES: 1.0,
            pynvml.NVML_MEMORY_UTILIZATION_SAMPLES: 0.38,
            pynvml.NVML_ENC_UTILIZATION_SAMPLES: 0.0,
            pynvml.NVML_DEC_UTILIZATION_SAMPLES: 0.0,
        }
        if sampling_type not in scale:
            raise self._not_supported()
        samples = [
            SimpleNamespace(
                timeStamp=stamp,
                sampleValue=SimpleNamespace(uiVal=round(scale[sampling_type] * self._window(handle, k))),
            )
            for k, stamp in self._kept_after(last_seen)
        ]
        if not samples:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, samples[::-1]

    def nvmlDeviceGetEncoderUtilization(self, handle: Any) -> list[int]:
        return [0, 167000]

    def nvmlDeviceGetDecoderUtilization(self, handle: Any) -> list[int]:
        return [0, 167000]

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        gi = getattr(handle, "gpu_instance", None)
        total_mib = TOTAL_MIB if gi is None else _profile_mib(self._mig[handle.index][gi - 1])
        used = (IDLE_USED_MIB + round(self.load(handle) * total_mib * 0.48)) * MIB
        total, reserved = total_mib * MIB, (RESERVED_MIB if gi is None else 0) * MIB
        return SimpleNamespace(total=total, reserved=reserved, used=used, free=total - reserved - used)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return round(POWER_IDLE_MW + self.load(handle) * (POWER_MAX_MW - POWER_IDLE_MW))

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        return POWER_LIMIT_MW

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        gpu, now = self._gpu(handle), self._now()
        gpu.energy_mj += self.nvmlDeviceGetPowerUsage(handle) * max(0.0, now - gpu.last_t)
        gpu.last_t = now
        return int(gpu.energy_mj)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return round(28 + 40 * self.load(handle))

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return 3201
        return round(345 + self.load(handle) * (1980 - 345))

    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:
        raise self._not_supported()  # the H200 has no fan of its own

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        raise self._not_supported()  # a single simulated GPU has no NVLink, like the H200 it imitates

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        return 0

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        return (0, 0, 0, 0)

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, bit_type: int, counter_type: int) -> int:
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return 0 if self.load(handle) > 0.05 else pynvml.nvmlClocksEventReasonGpuIdle

    def nvmlDeviceGetPerformanceState(self, handle: Any) -> int:
        return 0

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> list[Any]:
        out = []
        for field_id in field_ids:
            if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                value = SimpleNamespace(dVal=0.0, uiVal=0, ulVal=0, ullVal=0, sllVal=0, siVal=0, usVal=0)
                value.uiVal = round(30 + 35 * self.load(handle))
                out.append(SimpleNamespace(fieldId=field_id, nvmlReturn=0, valueType=1, value=value))
            else:  # NVLink counters: a single simulated GPU has no NVLink, like the H200 it imitates
                out.append(
                    SimpleNamespace(
                        fieldId=field_id,
                        nvmlReturn=pynvml.NVML_ERROR_NOT_SUPPORTED,
                        valueType=3,
                        value=SimpleNamespace(ullVal=0),
                    )
                )
        return out

    # -- XID events ------------------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> Any:
        return SimpleNamespace()

    def nvmlDeviceRegisterEvents(self, handle: Any, types: int, event_set: Any) -> None:
        return None

    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: Any) -> None:
        return None

    # -- GPM -------------------------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        return SimpleNamespace(isSupportedDevice=1)

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace(index=None, t=0.0)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        return None

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        sample.index, sample.gi, sample.t = handle.index, None, self._now()
        return sample

    def nvmlGpmMigSampleGet(self, handle: Any, gpu_instance_id: int, sample: Any) -> Any:
        sample.index, sample.gi, sample.t = handle.index, gpu_instance_id, self._now()
        return sample

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        handle = SimpleNamespace(index=request.sample2.index, gpu_instance=request.sample2.gi)
        load = self.busy(handle, request.sample1.t, request.sample2.t)
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

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if handle.index in self._mig else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        if index >= len(self._mig.get(handle.index, [])):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return SimpleNamespace(index=handle.index, gpu_instance=index + 1)

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        return int(handle.gpu_instance)

    # -- processes: NVML keeps one sample per ~200 ms window, owned by the process that held the GPU ----------

    def _window_owner(self, gpu: int, k: int) -> int | None:
        """Which process held the GPU in window ``k``: spread by share with a low-discrepancy sequence."""
        position = (k * 0.6180339887) % 1.0
        for pid, share in self._processes.get(gpu, {}).items():
            if position < share:
                return pid
            position -= share
        return None

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=(2048 + round(share * 40_000)) * MIB)
            for pid, share in self._processes.get(handle.index, {}).items()
        ]

    def nvmlDeviceGetProcessUtilization(self, handle: Any, last_seen: int) -> list[Any]:
        """The newest sample of each process, as NVML answers: a slower poll misses the ones in between."""
        latest: dict[int, Any] = {}
        for k, stamp in self._kept_after(last_seen):
            pid = self._window_owner(handle.index, k)
            if pid is not None and pid not in latest:
                util = self._window(handle, k)
                latest[pid] = SimpleNamespace(
                    pid=pid, timeStamp=stamp, smUtil=util, memUtil=round(0.38 * util), encUtil=0, decUtil=0
                )
        if not latest:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return list(latest.values())


def _profile_mib(profile: str) -> int:
    """ "1g.18gb" → 18432."""
    return int(profile.split(".")[1].removesuffix("gb")) * 1024
