"""``--enable-gpu-bind-unbind-watch``: GPUs bound to or unbound from the driver while the collector runs.

NVML enumerates the GPUs once, when it starts: a GPU bound later is not seen, and one unbound answers errors, until
NVML is started again. dcgm-exporter watches DCGM's bind/unbind event (DCGM 4.5 and newer) and rebuilds everything.
Without DCGM the driver's own list is the source: the PCI devices bound to the nvidia driver, the entries of
``/sys/bus/pci/drivers/nvidia`` named by PCI address. It is listed every poll interval; when the set changes, the
collection enumerates the GPUs again at the start of its next cycle, so no scrape sees an empty page.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from common.freshness import Freshness

log = logging.getLogger(__name__)

NVIDIA_DRIVER_DIR = Path("/sys/bus/pci/drivers/nvidia")
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", re.IGNORECASE)


class GpuPresence(Protocol):
    def present_gpus(self) -> frozenset[str]:
        """The PCI addresses of the GPUs bound to the driver now; ``OSError`` when they cannot be listed."""
        ...


class SysfsGpus:
    """The GPUs the kernel has bound to the nvidia driver, from sysfs (readable in a container: /sys is the host's)."""

    def __init__(self, driver_dir: Path = NVIDIA_DRIVER_DIR) -> None:
        self.driver_dir = driver_dir

    def present_gpus(self) -> frozenset[str]:
        try:
            names = os.listdir(self.driver_dir)
        except FileNotFoundError:  # the driver is not loaded: no GPU is bound to it
            return frozenset()
        return frozenset(n.lower() for n in names if _PCI_ADDRESS.fullmatch(n))


def describe_change(before: frozenset[str], now: frozenset[str]) -> str:
    parts = []
    if now - before:
        parts.append(f"GPU(s) bound: {', '.join(sorted(now - before))}")
    if before - now:
        parts.append(f"GPU(s) unbound: {', '.join(sorted(before - now))}")
    return "; ".join(parts)


class BindWatch:
    def __init__(
        self,
        presence: GpuPresence,
        on_change: Callable[[str], None],
        interval: float,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        source: Freshness | None = None,
    ) -> None:
        """``on_change`` hears what changed, in words, each time the bound set differs from the last listing;
        ``source`` of each listing that worked and each failure (``/health`` fails past its bound)."""
        self.source = source
        self._presence = presence
        self._on_change = on_change
        self._interval = interval
        self._sleep = sleep
        self._failing = ""

    async def run(self) -> None:
        """Poll until cancelled. The first listing is the baseline: only changes after it count."""
        last = self._look()
        log.info(
            "watching for GPUs bound to or unbound from the driver every %gs (%s GPU(s) bound now)",
            self._interval,
            "?" if last is None else len(last),
        )
        while True:
            await self._sleep(self._interval)
            now = self._look()
            if now is None:
                continue
            if last is not None and now != last:
                change = describe_change(last, now)
                log.info("%s", change)
                self._on_change(change)
            last = now

    def _look(self) -> frozenset[str] | None:
        try:
            present = self._presence.present_gpus()
        except OSError as e:
            if str(e) != self._failing:  # said once per distinct failure, not every poll
                self._failing = str(e)
                log.warning("cannot list the GPUs bound to the driver (%s); GPU changes are not seen meanwhile", e)
            if self.source is not None:
                self.source.failed(f"cannot list the GPUs bound to the driver: {e}")
            return None
        self._failing = ""
        if self.source is not None:
            self.source.succeeded()
        return present
