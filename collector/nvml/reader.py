"""NVML → plain readings: one dict of field values per GPU and cycle, nothing Prometheus-specific; and for shared
GPUs, what each process uses. Every NVML call the collector makes goes through the reader and its parts.

Faults degrade as narrowly as they can: a NotSupported answer removes one reading's fields for good (said once in
the log and kept in ``unsupported`` for the self-metrics); any other error on a reading costs those fields for this
cycle; a lost GPU costs that GPU's series for this cycle while the others keep flowing.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from collector.errors import NvmlReadError, NvmlUnavailable
from collector.nvml.api import Nvml
from collector.nvml.device import Device, GpuInfo, MigInstance, error_kind, text
from collector.nvml.event_windows import CLOCK_EVENTS_COUNT, XID_COUNT, Samples
from collector.nvml.fields import FIELDS, GPM, NVLINK, P2P, P2P_FIELD, SAMPLED_READINGS, SLOW_READINGS, XID, Values
from collector.nvml.label_fields import SYSTEM_LABELS
from collector.nvml.readings import READINGS

log = logging.getLogger(__name__)

NO_DRIVER = frozenset({"LibraryNotFound", "DriverNotLoaded"})  # NVML's words for "no NVIDIA driver here"


@dataclass(frozen=True)
class InstanceReading:
    instance: MigInstance
    values: Values


@dataclass(frozen=True)
class DeviceReading:
    gpu: GpuInfo
    values: Values
    instances: tuple[InstanceReading, ...] = ()
    # fields served as several samples with labels of their own (counts by XID, clock event or peer GPU)
    labelled: dict[str, Samples] = field(default_factory=dict)


@dataclass
class CycleResult:
    readings: list[DeviceReading] = field(default_factory=list)
    # (gpu index as text, error kind) → count in this cycle
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    lost: int = 0


@dataclass(frozen=True)
class ProcessSample:
    """One of NVML's per-process utilization samples: the process that held the GPU in one ~200 ms window."""

    pid: int
    timestamp_us: int  # NVML's clock
    sm_util: float  # percent


class NvmlReader:
    """Owns the NVML session: start, enumerate GPUs, read the requested fields of every GPU each cycle."""

    def __init__(
        self,
        nvml: Nvml,
        slow_every: int = 10,
        interval: float = 1.0,
        xid_window: float = 300.0,
        clock_events_window: float = 300.0,
        engine_every: int = 1,
    ) -> None:
        """``interval``: the collection interval, the span of GPU time the GPU's utilization averages over.
        ``slow_every``: read the slow readings every this many cycles; ``engine_every``: read the memory-copy,
        encoder and decoder utilizations every this many cycles, each averaged over as many intervals.
        ``xid_window``, ``clock_events_window``: seconds over which XID errors and clock events are counted."""
        self._nvml = nvml
        self._interval = interval
        self._slow_every = max(1, slow_every)
        self._engine_every = max(1, engine_every)
        # reading → (every how many cycles, offset): the engine utilizations on cycles of their own, so that a
        # cycle reads at most one of their buffers when there are cycles enough
        self._cadence = {name: (self._slow_every, 0) for name in SLOW_READINGS}
        engine = [name for name, spec in SAMPLED_READINGS.items() if not spec.every_cycle]
        self._cadence.update({name: (self._engine_every, i + 1) for i, name in enumerate(engine)})
        self._windows = {XID_COUNT: xid_window, CLOCK_EVENTS_COUNT: clock_events_window}
        self._cycle = 0
        self._devices: list[Device] = []
        self.driver_version = ""
        self.system_labels: dict[str, str] = {}  # label fields with one value for the whole node
        self._system_unsupported: dict[str, str] = {}
        self._reported: set[tuple[int, str]] = set()
        self._to_report: defaultdict[tuple[str, str], list[int]] = defaultdict(list)  # (field, why) → GPUs

    @property
    def gpus(self) -> list[GpuInfo]:
        return [d.info for d in self._devices]

    @property
    def unsupported(self) -> dict[tuple[int, str], str]:
        """(GPU, field) → why, for the fields asked of a GPU that lacks them."""
        return {
            (d.info.index, name): why
            for d in self._devices
            for name, why in d.unsupported.items()
            if (d.info.index, name) in self._reported
        }

    @property
    def point_sampled(self) -> set[tuple[int, str]]:
        """(GPU, field) pairs served from NVML's point value because the GPU keeps no samples of them."""
        return {(d.info.index, name) for d in self._devices for name in d.utilization.point}

    def open(self) -> None:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
            self.driver_version = text(nvml.nvmlSystemGetDriverVersion())
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as e:
            kind = error_kind(nvml, e)
            # the first thing a first run without a GPU meets: say how to run without one
            hint = "; on a machine without NVIDIA GPUs, --simulate-gpus N serves N simulated ones"
            hint = hint if kind in NO_DRIVER else ""
            raise NvmlUnavailable(f"NVML did not start: {kind} ({_describe(e)}){hint}") from e
        self.system_labels, self._system_unsupported = {"DCGM_FI_DRIVER_VERSION": self.driver_version}, {}
        for name, read in SYSTEM_LABELS.items():
            try:
                self.system_labels.setdefault(name, text(read(nvml)))
            except nvml.NVMLError as e:
                self._system_unsupported[name] = error_kind(nvml, e)
        devices = []
        for index in range(count):
            try:
                devices.append(self._open_device(index))
            except nvml.NVMLError as e:
                log.error("GPU %d cannot be opened (%s); its series are left out", index, error_kind(nvml, e))
        self._devices = devices
        log.info(
            "%s: driver %s, %d GPU(s): %s",
            "simulated NVML started (no GPU driver is used)" if getattr(nvml, "SIMULATED", False) else "NVML started",
            self.driver_version,
            len(devices),
            ", ".join(f"{d.info.index}={d.info.model} {d.info.uuid}" for d in devices) or "none",
        )

    def _open_device(self, index: int) -> Device:
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        try:
            minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
        except nvml.NVMLError:
            minor = index
        info = GpuInfo(
            index=index,
            uuid=text(nvml.nvmlDeviceGetUUID(handle)),
            pci_bus_id=text(nvml.nvmlDeviceGetPciInfo(handle).busId),
            minor=minor,
            model=text(nvml.nvmlDeviceGetName(handle)),
        )
        device = Device(nvml, info, handle, self._interval, self._interval * self._engine_every)
        device.find_instances(nvml)
        return device

    def close(self) -> None:
        for device in self._devices:
            device.close()
        self._devices = []
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()

    def read(self, fields: frozenset[str], labels: tuple[str, ...] = ()) -> CycleResult:
        """The asked ``fields`` of every GPU, each GPU named with the asked label fields (``labels``) it has."""
        by_reading: dict[str, frozenset[str]] = {}
        for name in fields:
            spec = FIELDS.get(name)
            if spec is not None:
                by_reading[spec.reading] = by_reading.get(spec.reading, frozenset()) | {name}
        result = CycleResult()
        refresh_slow = self._cycle % self._slow_every == 0
        self._cycle += 1
        for name in labels:
            if name in self._system_unsupported and (-1, name) not in self._reported:
                self._reported.add((-1, name))
                log.info("%s is not available (%s); the label is left out", name, self._system_unsupported[name])
        for device in self._devices:
            if refresh_slow and self._cycle > 1:
                device.find_instances(self._nvml)  # MIG layouts change rarely; look again on the slow tick
            for name, error in device.read_labels(self._nvml, labels):
                if getattr(error, "value", None) in _unsupported_codes(self._nvml):
                    self._mark_unsupported(device, {name}, error_kind(self._nvml, error))
                else:  # asked again next cycle
                    result.errors[(str(device.info.index), error_kind(self._nvml, error))] += 1
            values = self._read_device(device, by_reading, result, self._cycle - 1)
            if values is not None:
                instances = tuple(self._read_instances(device, fields, result))
                labelled = device.labelled(values, self._windows)
                result.readings.append(DeviceReading(device.info, values, instances, labelled))
        self._log_unsupported()
        return result

    def process_memory(self, index: int) -> dict[int, int]:
        """pid → bytes of device memory, for the processes running on GPU ``index`` now; empty when NVML cannot say."""
        nvml = self._nvml
        device = self._device(index)
        if device is None:
            return {}
        try:
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(device.handle)
        except nvml.NVMLError:
            return {}
        out = {}
        for p in processes:
            used = getattr(p, "usedGpuMemory", None)
            out[int(p.pid)] = int(used) if isinstance(used, int) else 0
        return out

    def process_utilization(self, index: int, since_us: int) -> list[ProcessSample]:
        """The newest sample of each process on GPU ``index`` taken after ``since_us``; empty when no process ran
        since. Called from the process sampler's thread; raises ``NvmlReadError`` when NVML cannot answer."""
        nvml = self._nvml
        device = self._device(index)
        if device is None:  # NVML was shut down (every GPU lost) and has not started again yet
            raise NvmlReadError(f"GPU {index} is not open")
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(device.handle, since_us)
        except nvml.NVMLError as e:
            if e.value == nvml.NVML_ERROR_NOT_FOUND:
                return []
            raise NvmlReadError(f"GPU {index}: per-process utilization: {error_kind(nvml, e)}") from e
        return [ProcessSample(int(s.pid), int(s.timeStamp), float(s.smUtil)) for s in samples]

    def _device(self, index: int) -> Device | None:
        return next((d for d in self._devices if d.info.index == index), None)

    def _read_instances(self, device: Device, fields: frozenset[str], result: CycleResult) -> list[InstanceReading]:
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
        self, device: Device, by_reading: dict[str, frozenset[str]], result: CycleResult, cycle: int
    ) -> Values | None:
        nvml = self._nvml
        gpu = str(device.info.index)
        values: Values = {}
        for reading, wanted in by_reading.items():
            for name in wanted & device.unsupported.keys():
                self._report(device, name)  # said once, also for what the GPU lacked from the start
            todo = wanted - device.unsupported.keys()
            if not todo:
                continue
            got: Values | None
            every, offset = self._cadence.get(reading, (1, 0))
            try:
                if (cycle + offset) % every and reading in device.slow_values:
                    got = device.slow_values[reading]
                else:
                    got = self._call(device, reading, todo)
                    if every > 1 and got is not None:
                        device.slow_values[reading] = got
            except nvml.NVMLError as e:
                kind = error_kind(nvml, e)
                if e.value in _unsupported_codes(nvml):
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

    def _call(self, device: Device, reading: str, fields: frozenset[str]) -> Values | None:
        if reading == GPM:
            return device.gpm.read(fields) if device.gpm is not None else {}
        if reading == XID:  # polled once: the count over a window takes the XIDs this poll drained
            return dict.fromkeys(fields, float(device.xid.poll())) if device.xid is not None else {}
        if reading == NVLINK:
            return device.nvlink.read(fields) if device.nvlink is not None else {}
        if reading == P2P:
            device.p2p = tuple(self._p2p(device))
            return {P2P_FIELD: float(len(device.p2p))}
        if reading in SAMPLED_READINGS:
            return device.utilization.read(reading)
        return READINGS[reading](self._nvml, device.handle)

    def _p2p(self, device: Device) -> list[tuple[int, int]]:
        """NVML's peer-to-peer status over NVLink from this GPU to each other one; a pair NVML cannot answer is left
        out."""
        nvml = self._nvml
        out = []
        for peer in self._devices:
            if peer is device:
                continue
            try:
                status = nvml.nvmlDeviceGetP2PStatus(device.handle, peer.handle, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
            except nvml.NVMLError:
                continue
            out.append((peer.info.index, int(status)))
        return out

    def _mark_unsupported(self, device: Device, names: frozenset[str] | set[str], why: str) -> None:
        for name in sorted(names):
            device.unsupported[name] = why
            self._report(device, name)

    def _report(self, device: Device, name: str) -> None:
        if (device.info.index, name) not in self._reported:
            self._reported.add((device.info.index, name))
            self._to_report[(name, device.unsupported[name])].append(device.info.index)

    def _log_unsupported(self) -> None:
        """The fields first asked of GPUs that lack them, once: one line per reason and set of GPUs."""
        lines: defaultdict[tuple[str, tuple[int, ...]], list[str]] = defaultdict(list)
        for (name, why), gpus in sorted(self._to_report.items()):
            lines[(why, tuple(gpus))].append(name)
        for (why, indices), names in lines.items():
            where = ",".join(map(str, indices))
            log.info("GPU %s: not available (%s), left out: %s", where, why, ", ".join(names))
        self._to_report.clear()


def _unsupported_codes(nvml: Nvml) -> frozenset[int]:
    """Errors that say a GPU or driver will not give a value, now or later (FunctionNotFound: a driver older than
    the call)."""
    return frozenset({nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_NO_PERMISSION, nvml.NVML_ERROR_FUNCTION_NOT_FOUND})


def _fatal_codes(nvml: Nvml) -> frozenset[int]:
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
