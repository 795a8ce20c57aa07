"""NVML → plain readings: one dict of field values per GPU and cycle, nothing Prometheus-specific.

Faults degrade as narrowly as they can: a NotSupported answer removes one reading's fields for good (said once in
the log and kept in ``unsupported`` for the self-metrics); any other error on a reading costs those fields for this
cycle; a lost GPU costs that GPU's series for this cycle while the others keep flowing.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .errors import NvmlUnavailable
from .fields import FIELDS, GPM, NVLINK_FIELDS, READINGS, SAMPLED_READINGS, SLOW_READINGS, XID, Values
from .gpm import GpmSampler, gpm_supported
from .utilization import UtilizationSampler
from .xid import XidWatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    pci_bus_id: str
    minor: int
    model: str

    @property
    def device(self) -> str:
        return f"nvidia{self.minor}"


@dataclass(frozen=True)
class MigInstance:
    gpu_instance_id: int
    profile: str  # "1g.18gb"
    uuid: str  # "MIG-..."


@dataclass(frozen=True)
class InstanceReading:
    instance: MigInstance
    values: Values


@dataclass(frozen=True)
class DeviceReading:
    gpu: GpuInfo
    values: Values
    instances: tuple[InstanceReading, ...] = ()
    handle: Any = field(default=None, compare=False, repr=False)  # for per-process reads of shared GPUs


@dataclass
class CycleResult:
    readings: list[DeviceReading] = field(default_factory=list)
    # (gpu index as text, error kind) → count in this cycle
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    lost: int = 0


def error_kind(nvml: Any, error: BaseException) -> str:
    """A short stable name for an NVML error ("NotSupported", "GpuIsLost"), without calling into the library."""
    if isinstance(error, nvml.NVMLError):
        name = type(error).__name__
        return name.removeprefix("NVMLError_") if name != "NVMLError" else f"code{getattr(error, 'value', '?')}"
    return type(error).__name__


class _Device:
    def __init__(self, nvml: Any, info: GpuInfo, handle: Any, interval: float) -> None:
        self.info = info
        self.handle = handle
        self.utilization = UtilizationSampler(nvml, handle, interval)
        self.unsupported: dict[str, str] = {}
        self.slow_values: dict[str, Values] = {}
        self.instances: list[tuple[MigInstance, Any, GpmSampler | None]] = []
        self.gpm: GpmSampler | None = None
        self.xid: XidWatcher | None = None
        if gpm_supported(nvml, handle):
            self.gpm = GpmSampler(nvml, handle)
        else:
            self.unsupported.update(dict.fromkeys(_fields_of(GPM), "GPM not supported on this GPU or driver"))
        if not _has_active_nvlink(nvml, handle):
            self.unsupported.update(dict.fromkeys(NVLINK_FIELDS, "no active NVLink link"))
        try:
            self.xid = XidWatcher(nvml, handle)
        except nvml.NVMLError as e:
            self.unsupported.update(dict.fromkeys(_fields_of(XID), f"XID events: {error_kind(nvml, e)}"))

    def find_instances(self, nvml: Any) -> None:
        """The MIG GPU instances of this GPU, each with its own GPM sampler; none when MIG is off or unsupported."""
        for _, _, sampler in self.instances:
            if sampler is not None:
                sampler.close()
        self.instances = []
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(self.handle)
            if current != nvml.NVML_DEVICE_MIG_ENABLE:
                return
            count = nvml.nvmlDeviceGetMaxMigDeviceCount(self.handle)
        except nvml.NVMLError:
            return
        for i in range(count):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(self.handle, i)
                gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
                name = _text(nvml.nvmlDeviceGetName(mig))
                instance = MigInstance(gi, _profile(name), _text(nvml.nvmlDeviceGetUUID(mig)))
            except nvml.NVMLError:
                continue  # NotFound: no MIG device at this slot
            sampler = GpmSampler(nvml, self.handle, gi) if self.gpm is not None else None
            self.instances.append((instance, mig, sampler))

    def close(self) -> None:
        for sampler in [self.gpm, *(s for _, _, s in self.instances)]:
            if sampler is not None:
                sampler.close()
        if self.xid is not None:
            self.xid.close()


def _has_active_nvlink(nvml: Any, handle: Any) -> bool:
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) == nvml.NVML_FEATURE_ENABLED:
                return True
        except nvml.NVMLError:
            continue
    return False


def _profile(mig_name: str) -> str:
    """ "NVIDIA H200 MIG 1g.18gb" → "1g.18gb"; the whole name when it carries no profile."""
    match = re.search(r"\d+g\.\d+gb", mig_name)
    return match.group(0) if match else mig_name


def _fields_of(reading: str) -> list[str]:
    return [f.name for f in FIELDS.values() if f.reading == reading]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    """Owns the NVML session: start, enumerate GPUs, read the requested fields of every GPU each cycle."""

    def __init__(self, nvml: Any, slow_every: int = 10, interval: float = 1.0) -> None:
        """``interval``: the span of GPU time each sampled utilization averages over (the collection interval)."""
        self._nvml = nvml
        self._interval = interval
        self._slow_every = max(1, slow_every)
        self._cycle = 0
        self._devices: list[_Device] = []
        self.driver_version = ""
        self._reported: set[tuple[int, str]] = set()

    @property
    def gpus(self) -> list[GpuInfo]:
        return [d.info for d in self._devices]

    @property
    def unsupported(self) -> dict[tuple[int, str], str]:
        return {(d.info.index, name): why for d in self._devices for name, why in d.unsupported.items()}

    @property
    def point_sampled(self) -> set[tuple[int, str]]:
        """(GPU, field) pairs served from NVML's point value because the GPU keeps no samples of them."""
        return {(d.info.index, name) for d in self._devices for name in d.utilization.point}

    def open(self) -> None:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
            self.driver_version = _text(nvml.nvmlSystemGetDriverVersion())
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as e:
            raise NvmlUnavailable(f"NVML did not start: {error_kind(nvml, e)} ({_describe(e)})") from e
        devices = []
        for index in range(count):
            try:
                devices.append(self._open_device(index))
            except nvml.NVMLError as e:
                log.error("GPU %d cannot be opened (%s); its series are left out", index, error_kind(nvml, e))
        self._devices = devices
        log.info(
            "NVML started: driver %s, %d GPU(s): %s",
            self.driver_version,
            len(devices),
            ", ".join(f"{d.info.index}={d.info.model} {d.info.uuid}" for d in devices) or "none",
        )

    def _open_device(self, index: int) -> _Device:
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        try:
            minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
        except nvml.NVMLError:
            minor = index
        info = GpuInfo(
            index=index,
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId),
            minor=minor,
            model=_text(nvml.nvmlDeviceGetName(handle)),
        )
        device = _Device(nvml, info, handle, self._interval)
        device.find_instances(nvml)
        return device

    def close(self) -> None:
        for device in self._devices:
            device.close()
        self._devices = []
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()

    def read(self, fields: frozenset[str]) -> CycleResult:
        by_reading: dict[str, frozenset[str]] = {}
        for name in fields:
            spec = FIELDS.get(name)
            if spec is not None:
                by_reading[spec.reading] = by_reading.get(spec.reading, frozenset()) | {name}
        result = CycleResult()
        refresh_slow = self._cycle % self._slow_every == 0
        self._cycle += 1
        for device in self._devices:
            if refresh_slow and self._cycle > 1:
                device.find_instances(self._nvml)  # MIG layouts change rarely; look again on the slow tick
            values = self._read_device(device, by_reading, result, refresh_slow)
            if values is not None:
                instances = tuple(self._read_instances(device, fields, result))
                result.readings.append(DeviceReading(device.info, values, instances, device.handle))
        return result

    def _read_instances(self, device: _Device, fields: frozenset[str], result: CycleResult) -> list[InstanceReading]:
        """Memory and profiling values per MIG instance; the other fields are whole-GPU only."""
        nvml = self._nvml
        memory = {f.name for f in FIELDS.values() if f.reading == "memory"} & fields
        readings = []
        for instance, mig, sampler in device.instances:
            values: Values = {}
            try:
                if memory:
                    values.update({k: float(v) for k, v in READINGS["memory"](nvml, mig).items() if k in memory})
                if sampler is not None:
                    values.update(sampler.read(fields - device.unsupported.keys()) or {})
            except nvml.NVMLError as e:
                result.errors[(str(device.info.index), error_kind(nvml, e))] += 1
                continue
            readings.append(InstanceReading(instance, values))
        return readings

    def _read_device(
        self, device: _Device, by_reading: dict[str, frozenset[str]], result: CycleResult, refresh_slow: bool
    ) -> Values | None:
        nvml = self._nvml
        gpu = str(device.info.index)
        values: Values = {}
        for reading, wanted in by_reading.items():
            todo = wanted - device.unsupported.keys()
            if not todo:
                continue
            got: Values | None
            try:
                if reading in SLOW_READINGS and not refresh_slow and reading in device.slow_values:
                    got = device.slow_values[reading]
                else:
                    got = self._call(device, reading, todo)
                    if reading in SLOW_READINGS and got is not None:
                        device.slow_values[reading] = got
            except nvml.NVMLError as e:
                kind = error_kind(nvml, e)
                if e.value in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_NO_PERMISSION):
                    self._mark_unsupported(device, todo, kind)
                    continue
                result.errors[(gpu, kind)] += 1
                if e.value in _fatal_codes(nvml):
                    result.lost += 1
                    log.warning("GPU %s failed (%s); its series are left out this cycle", gpu, kind)
                    return None
                continue
            if got is None:  # no interval to report yet (GPM's first sample), or no recent utilization sample
                continue
            for name in todo:
                if name in got:
                    values[name] = float(got[name])
                else:
                    self._mark_unsupported(device, {name}, "NotSupported")
        return values

    def _call(self, device: _Device, reading: str, fields: frozenset[str]) -> Values | None:
        if reading == GPM:
            return device.gpm.read(fields) if device.gpm is not None else {}
        if reading == XID:
            return {name: float(device.xid.poll()) for name in fields} if device.xid is not None else {}
        if reading in SAMPLED_READINGS:
            return device.utilization.read(reading)
        return READINGS[reading](self._nvml, device.handle)

    def _mark_unsupported(self, device: _Device, names: frozenset[str] | set[str], why: str) -> None:
        for name in sorted(names):
            device.unsupported[name] = why
            if (device.info.index, name) not in self._reported:
                self._reported.add((device.info.index, name))
                log.info("GPU %d: %s is not available (%s); the series is left out", device.info.index, name, why)


def _fatal_codes(nvml: Any) -> frozenset[int]:
    return frozenset(
        {
            nvml.NVML_ERROR_GPU_IS_LOST,
            nvml.NVML_ERROR_RESET_REQUIRED,
            nvml.NVML_ERROR_UNINITIALIZED,
            nvml.NVML_ERROR_DRIVER_NOT_LOADED,
            nvml.NVML_ERROR_UNKNOWN,
        }
    )


def _describe(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # str() of an NVMLError calls into the library, which may be what failed
        return repr(error)
