"""One opened GPU: its handle and the parts that keep state from one cycle to the next (utilization sample windows,
GPM samples, XID events, MIG instances)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from collector.nvml.api import Handle, Nvml, Text
from collector.nvml.event_windows import CLOCK_EVENTS, CLOCK_EVENTS_COUNT, XID_COUNT, EventWindow, Samples, clock_events
from collector.nvml.fields import FIELDS, GPM, NVLINK, NVLINK_FIELDS, P2P_FIELD, XID, Values
from collector.nvml.gpm import GpmSampler, gpm_supported
from collector.nvml.label_fields import GPU_LABELS
from collector.nvml.nvlink import NvLinkThroughput, active_links, p2p_samples
from collector.nvml.utilization import UtilizationSampler
from collector.nvml.xid import XidWatcher


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    pci_bus_id: str
    minor: int
    model: str
    labels: tuple[tuple[str, str], ...] = ()  # the label fields a counters file asks for (label_fields.py)

    @property
    def device(self) -> str:
        return f"nvidia{self.minor}"


@dataclass(frozen=True)
class MigInstance:
    gpu_instance_id: int
    profile: str  # "1g.18gb"
    uuid: str  # "MIG-..."


def error_kind(nvml: Nvml, error: BaseException) -> str:
    """A short stable name for an NVML error ("NotSupported", "GpuIsLost"), without calling into the library."""
    if isinstance(error, nvml.NVMLError):
        name = type(error).__name__
        return name.removeprefix("NVMLError_") if name != "NVMLError" else f"code{getattr(error, 'value', '?')}"
    return type(error).__name__


class Device:
    def __init__(
        self, nvml: Nvml, info: GpuInfo, handle: Handle, interval: float, engine_interval: float | None = None
    ) -> None:
        self.info = info
        self.handle = handle
        self.utilization = UtilizationSampler(nvml, handle, interval, engine_interval)
        self.unsupported: dict[str, str] = {}
        self.slow_values: dict[str, Values] = {}  # the last values of readings not read every cycle
        self.instances: list[tuple[MigInstance, Handle, GpmSampler | None]] = []
        self.gpm: GpmSampler | None = None
        self.xid: XidWatcher | None = None
        self.nvlink: NvLinkThroughput | None = None
        self.label_values: dict[str, str] = {}  # per-GPU label fields read so far; they do not change
        self.windows: dict[str, EventWindow] = {}  # event counts over dcgm-exporter's windows, by field
        self.p2p: tuple[tuple[int, int], ...] = ()  # (peer GPU index, NVML's P2P status over NVLink)
        if gpm_supported(nvml, handle):
            self.gpm = GpmSampler(nvml, handle)
        else:
            self.unsupported.update(dict.fromkeys(_fields_of(GPM), "GPM not supported on this GPU or driver"))
        links = active_links(nvml, handle)
        if links:
            self.nvlink = NvLinkThroughput(nvml, handle, links)
            idle = set(_fields_of(NVLINK)) - self.nvlink.fields
            self.unsupported.update(dict.fromkeys(idle, "this NVLink link is not active"))
        else:
            self.unsupported.update(dict.fromkeys(NVLINK_FIELDS, "no active NVLink link"))
        try:
            self.xid = XidWatcher(nvml, handle)
        except nvml.NVMLError as e:
            self.unsupported.update(dict.fromkeys(_fields_of(XID), f"XID events: {error_kind(nvml, e)}"))

    def read_labels(self, nvml: Nvml, labels: tuple[str, ...]) -> list[tuple[str, BaseException]]:
        """Reads the asked label fields of this GPU not read yet, and names the GPU with the asked ones it has;
        returns the ones NVML refused, with its error (one marked unsupported is not asked again)."""
        failed: list[tuple[str, BaseException]] = []
        for name in labels:
            read = GPU_LABELS.get(name)
            if read is None or name in self.label_values or name in self.unsupported:
                continue
            try:
                self.label_values[name] = text(read(nvml, self.handle))
            except nvml.NVMLError as e:
                failed.append((name, e))
        own = tuple((name, self.label_values[name]) for name in labels if name in self.label_values)
        if own != self.info.labels:
            self.info = replace(self.info, labels=own)
        return failed

    def labelled(self, values: Values, windows: Mapping[str, float]) -> dict[str, Samples]:
        """The fields read as one value and served as several labelled samples, taken out of ``values``: counts
        over a window of ``windows[field]`` seconds, statuses per peer GPU."""
        out: dict[str, Samples] = {}
        if CLOCK_EVENTS_COUNT in values:
            window = self._window(CLOCK_EVENTS_COUNT, windows)
            window.add(clock_events(int(values.pop(CLOCK_EVENTS_COUNT))))
            out[CLOCK_EVENTS_COUNT] = window.samples("clock_event", CLOCK_EVENTS.__getitem__)
        if XID_COUNT in values:
            values.pop(XID_COUNT)
            window = self._window(XID_COUNT, windows)
            window.add(self.xid.drained if self.xid is not None else ())
            out[XID_COUNT] = window.samples("xid")
        if P2P_FIELD in values:
            values.pop(P2P_FIELD)
            out[P2P_FIELD] = p2p_samples(self.p2p)
        return out

    def _window(self, name: str, windows: Mapping[str, float]) -> EventWindow:
        if name not in self.windows:
            self.windows[name] = EventWindow(windows[name])
        return self.windows[name]

    def find_instances(self, nvml: Nvml) -> None:
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
                name = text(nvml.nvmlDeviceGetName(mig))
                instance = MigInstance(gi, _profile(name), text(nvml.nvmlDeviceGetUUID(mig)))
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


def _profile(mig_name: str) -> str:
    """ "NVIDIA H200 MIG 1g.18gb" → "1g.18gb"; the whole name when it carries no profile."""
    match = re.search(r"\d+g\.\d+gb", mig_name)
    return match.group(0) if match else mig_name


def _fields_of(reading: str) -> list[str]:
    return [f.name for f in FIELDS.values() if f.reading == reading]


def text(value: Text) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
