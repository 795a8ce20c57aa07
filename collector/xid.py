"""XID errors: the driver's critical error events, drained without blocking once per collection cycle."""

from __future__ import annotations

import contextlib

from .nvml_api import Handle, Nvml

# A burst of events larger than this is drained over several cycles rather than stalling one.
_MAX_EVENTS_PER_POLL = 64


class XidWatcher:
    """Registers for XID events on one device and remembers the last XID seen (0 until one arrives)."""

    def __init__(self, nvml: Nvml, handle: Handle) -> None:
        self._nvml = nvml
        self._events = nvml.nvmlEventSetCreate()
        try:
            nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._events)
        except nvml.NVMLError:
            nvml.nvmlEventSetFree(self._events)
            raise
        self.last_xid = 0

    def poll(self) -> int:
        nvml = self._nvml
        for _ in range(_MAX_EVENTS_PER_POLL):
            try:
                event = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError as e:
                if e.value == nvml.NVML_ERROR_TIMEOUT:
                    break
                raise
            if event.eventType & nvml.nvmlEventTypeXidCriticalError:
                self.last_xid = int(event.eventData)
        return self.last_xid

    def close(self) -> None:
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlEventSetFree(self._events)
