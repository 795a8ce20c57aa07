"""``--dump-enabled``: the debug dumps dcgm-exporter writes for troubleshooting.

dcgm-exporter writes two JSON files into ``--dump-directory`` when it renders a scrape: what it gathered
(``metrics-GPU-<time>-<random>.json``) and the devices it reads (``deviceinfo-GPU-...``), gzipped unless
``--dump-compression=false``; every hour it removes files older than ``--dump-retention`` hours (0: none). Here the
same two files are written when a scrape is served a collection not dumped yet (the next scrape of the same
collection would write the same bytes): the series exactly as served, and the GPUs NVML enumerated with the driver
version. Files are written off the event loop; a failure is logged once per distinct error and costs no scrape.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collector.exposition import Family
from collector.nvml.device import GpuInfo
from collector.web.messages import Request, Response, Served

log = logging.getLogger(__name__)

_CLEAN_EVERY = 3600.0
_DUMP_NAME = re.compile(r"(metrics|deviceinfo)-GPU-\d{8}-\d{6}-[0-9a-f]{8}\.json(\.gz)?")


def _families(families: tuple[Family, ...]) -> list[dict[str, Any]]:
    return [
        {
            "name": f.name,
            "type": f.type,
            "help": f.help,
            "samples": [{"labels": dict(labels), "value": value} for labels, value in f.samples],
        }
        for f in families
    ]


class Dumper:
    def __init__(
        self,
        directory: Path,
        retention_hours: int,
        compress: bool,
        devices: Callable[[], tuple[str, list[GpuInfo]]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``devices``: the driver version and the GPUs the reader has open now."""
        self.directory = directory
        self._retention = retention_hours * 3600.0
        self._compress = compress
        self._devices = devices
        self._clock = clock
        self._dumped_at = -1.0  # when the last dumped collection was taken
        self._failing = ""

    def describe(self) -> str:
        kept = f"kept {self._retention / 3600:g} h" if self._retention else "never removed"
        return f"{self.directory}, {'gzip' if self._compress else 'plain'} JSON, {kept}"

    def dump(self, families: tuple[Family, ...], taken_at: float) -> list[Path]:
        """Write the two files for the collection taken at ``taken_at`` unless it was dumped already."""
        if taken_at == self._dumped_at:
            return []
        self._dumped_at = taken_at
        return self._write(families, taken_at)

    def _write(self, families: tuple[Family, ...], taken_at: float) -> list[Path]:
        driver, gpus = self._devices()
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self._clock()))
        documents = {
            "metrics": {"taken_at": taken_at, "families": _families(families)},
            "deviceinfo": {"driver_version": driver, "gpus": [dataclasses.asdict(g) for g in gpus]},
        }
        written = []
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for prefix, document in documents.items():
                name = f"{prefix}-GPU-{stamp}-{secrets.token_hex(4)}.json" + (".gz" if self._compress else "")
                data = json.dumps(document, indent=2).encode()
                path = self.directory / name
                path.write_bytes(gzip.compress(data) if self._compress else data)
                written.append(path)
        except OSError as e:
            self._failed(f"debug dump not written to {self.directory}: {e}")
            return written
        self._failing = ""
        log.debug("debug dump written: %s", ", ".join(str(p) for p in written))
        return written

    def clean(self) -> int:
        """Remove this collector's dump files older than the retention; how many."""
        if not self._retention:
            return 0
        cutoff = self._clock() - self._retention
        removed = 0
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return 0
        except OSError as e:
            self._failed(f"debug dumps in {self.directory} not cleaned up: {e}")
            return 0
        for entry in entries:
            if not _DUMP_NAME.fullmatch(entry.name):
                continue  # another program's file: not ours to remove
            try:
                if entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed += 1
            except FileNotFoundError:
                pass
            except OSError as e:
                self._failed(f"debug dump {entry.path} not removed: {e}")
        return removed

    async def run(self) -> None:
        """Clean up now and every hour, until cancelled."""
        while True:
            removed = await asyncio.to_thread(self.clean)
            if removed:
                log.info("removed %d debug dump file(s) older than the retention", removed)
            await asyncio.sleep(_CLEAN_EVERY)

    def on_response(self, latest: Callable[[], tuple[tuple[Family, ...], float]]) -> Served:
        """What hears of each answer the server sends: a served /metrics triggers the dump of what it served."""

        def prepared(request: Request, response: Response) -> None:
            if request.path != "/metrics" or response.status != 200:
                return
            families, taken_at = latest()
            if taken_at != self._dumped_at:  # checked and set here, on the loop: one dump per collection
                self._dumped_at = taken_at
                asyncio.get_running_loop().run_in_executor(None, self._write, families, taken_at)

        return prepared

    def _failed(self, message: str) -> None:
        if message != self._failing:
            self._failing = message
            log.warning("%s", message)
