"""The collection loop: on its own thread and interval, read NVML, attach owners, build families, publish.

A scrape only reads the last published ``Exposition`` (rendered once, then cached), so it never waits on NVML or
on the kubelet. Configuration reloads swap in between cycles, so no scrape sees an empty or partial set.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from collector.counters.file import Counters
from collector.counters.source import CountersFile, CountersSource
from collector.errors import ConfigError, NvmlUnavailable
from collector.exposition import Family, Labels, render_openmetrics, render_text
from collector.nvml.reader import CycleResult, NvmlReader
from collector.pods.hpc_jobs import HpcJobs
from collector.scrape_phase import ScrapePhase
from collector.self_metrics import Background, SelfStats, self_families
from collector.series import device_series, gpu_families
from common.backoff import Backoff
from common.freshness import DEFAULT_TIMING
from common.supervisor import Guard

if TYPE_CHECKING:  # imported with -k only (collector-bench.md, memory)
    from collector.pods.attribution import Attribution

log = logging.getLogger(__name__)

# After this many cycles in which every GPU failed, NVML is shut down and started again (a driver reload).
_REINIT_AFTER_ALL_LOST = 3
_MAX_RETRY_SECONDS = 30.0
# How long the first cycle waits for the kubelet's pod-resources answer and the pod directory's first listing, which
# the event loop fetches as the collector starts: the kubelet answers on its socket in milliseconds and a node's pods
# list in well under a second. Without it the first cycle, which starts before the event loop, would name no pods.
_FIRST_ATTRIBUTION_WAIT = 2.0


class Exposition:
    """One published set of families; each format is rendered on first request and then reused."""

    def __init__(self, families: Sequence[Family], taken_at: float) -> None:
        self.families = tuple(families)
        self.taken_at = taken_at
        self._text: bytes | None = None
        self._openmetrics: bytes | None = None

    def text(self) -> bytes:
        if self._text is None:
            self._text = render_text(self.families)
        return self._text

    def openmetrics(self) -> bytes:
        if self._openmetrics is None:
            self._openmetrics = render_openmetrics(self.families)
        return self._openmetrics


@dataclass(frozen=True)
class Health:
    ok: bool
    reason: str


class Collection:
    def __init__(
        self,
        reader: NvmlReader,
        counters: CountersSource | str | None,
        *,
        interval: float = 1.0,
        common_labels: Labels = (),
        replace_blanks: bool = False,
        help_prefix: str = "",
        label_names: Mapping[str, str] | None = None,
        attribution: Attribution | None = None,
        hpc_jobs: HpcJobs | None = None,
        background: Background | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``reader`` is opened by the first cycle (again after NVML restarts) and closed by ``stop``.
        ``counters``: where the counters come from, or a counters file's path (None: the built-in file).
        ``label_names`` renames labels of GPU series (``-o``). ``attribution`` attaches pods to the readings and
        adds its own self-metrics; without it, series name GPUs only.
        ``hpc_jobs`` labels the series of GPUs that batch jobs hold (``--hpc-job-mapping-dir``).
        ``background``: the state of the background work, published with the collector's own series; the cycle is
        one of its sources (a cycle that raises is logged, counted and tried again next interval).
        """
        self._hpc_jobs = hpc_jobs
        self._reader = reader
        self._source = counters if counters is not None and not isinstance(counters, str) else CountersFile(counters)
        self.counters: Counters = self._source.load()
        self._label_names = label_names
        self.interval = interval
        self._common = common_labels
        self._replace_blanks = replace_blanks
        self._help_prefix = help_prefix
        self._attribution = attribution
        self._clock = clock
        self.background = background or Background()
        cycles = self.background.sources.add("collection", DEFAULT_TIMING.bound(interval))
        self._guard = Guard("collection", self.background, cycles)
        self.stats = SelfStats()
        self.scrapes = ScrapePhase(interval)  # the server notes each /metrics request here
        self._open = False
        self._all_lost_cycles = 0
        self._retry = Backoff(1.0, _MAX_RETRY_SECONDS, jitter=lambda: 0.0)  # one collector per node: no herd
        self._reload_requested = threading.Event()
        self._rescan = ""  # why the GPUs must be enumerated again; empty: they need not
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.health = Health(False, "no collection has run yet")
        self.latest = Exposition((), 0.0)
        for warning in self.counters.warnings:
            log.warning("%s", warning)

    @property
    def reader(self) -> NvmlReader:
        """The NVML reader the cycles use (for what reports on the GPUs it has open)."""
        return self._reader

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="collection", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._reader.close()

    def request_rescan(self, why: str) -> None:
        """Enumerate the GPUs again at the start of the next cycle (GPUs bound or unbound); safe from any thread."""
        self._rescan = why

    def request_reload(self) -> None:
        """Safe to call from a signal handler: the reload happens at the start of the next cycle."""
        self._reload_requested.set()

    def _run(self) -> None:
        waited = self._attribution.wait_ready(_FIRST_ATTRIBUTION_WAIT, self._stop) if self._attribution else True
        if not waited and not self._stop.is_set():
            log.info(
                "the first collection goes out without every pod named: the kubelet's pod-resources or the pod "
                "directory did not answer within %.0f s",
                _FIRST_ATTRIBUTION_WAIT,
            )
        while not self._stop.is_set():
            started = time.monotonic()
            delay = self._guard.step(self.run_once)
            now = time.monotonic()
            if delay is not None and self._open:  # a cycle ran: the next one ends just before the scrapers come
                wait = self.scrapes.wait(started + self.interval, now - started, now)
            else:  # NVML is starting again, or the cycle failed: its own back-off
                wait = max(0.0, (self.interval if delay is None else delay) - (now - started))
            self._stop.wait(wait)

    # -- one cycle -------------------------------------------------------------------------------------------

    def run_once(self) -> float:
        """Run one cycle and publish its result; returns how long to wait before the next one."""
        self._maybe_reload()
        if self._rescan and self._open:
            log.info("%s: enumerating the GPUs again", self._rescan)
            self._reader.close()
            self._open = False
        self._rescan = ""
        if not self._open and not self._start_nvml():
            self._publish([])
            return self._retry.next()
        wall, cpu = time.perf_counter(), time.thread_time()
        result = self._reader.read(self.counters.fields, self.counters.labels)
        if self._attribution is not None:
            series = self._attribution(result)
        else:
            series = device_series(result.readings, self._replace_blanks)
        if self._hpc_jobs is not None:
            series = self._hpc_jobs.label(series)
        families = gpu_families(
            series,
            self.counters,
            self._common,
            self._reader.system_labels,
            self._help_prefix,
            self._label_names,
        )
        self.stats.record_cycle(
            duration=time.perf_counter() - wall,
            cpu=time.thread_time() - cpu,
            errors=result.errors,
            now=self._clock(),
        )
        self._watch_for_lost_gpus(result)
        self._publish(families)
        return self.interval

    def _start_nvml(self) -> bool:
        try:
            self._reader.open()
        except NvmlUnavailable as e:
            if self.health.reason != str(e):
                log.error("%s; retrying, /health answers 503 until it starts", e)
            self.health = Health(False, str(e))
            self.stats.errors[("", "NvmlInit")] += 1
            self.stats.nvml_up = False
            return False
        self._open = True
        self._retry.reset()
        self.stats.nvml_up = True
        self.health = Health(True, f"NVML started; {len(self._reader.gpus)} GPU(s)")
        return True

    def _watch_for_lost_gpus(self, result: CycleResult) -> None:
        gpus = len(self._reader.gpus)
        if gpus and result.lost == gpus:
            self._all_lost_cycles += 1
            self.health = Health(False, f"every GPU failed in the last {self._all_lost_cycles} cycle(s)")
            if self._all_lost_cycles >= _REINIT_AFTER_ALL_LOST:
                log.error("every GPU failed %d cycles running; restarting NVML", self._all_lost_cycles)
                self._reader.close()
                self._open = False
                self.stats.nvml_up = False
                self._all_lost_cycles = 0
        else:
            self._all_lost_cycles = 0
            if result.lost:
                self.health = Health(True, f"{result.lost} of {gpus} GPU(s) failed in the last cycle")
            else:
                self.health = Health(True, f"collecting {gpus} GPU(s)")

    def _publish(self, families: list[Family]) -> None:
        own = self_families(
            self.stats,
            self._reader.unsupported,
            len(self._reader.gpus) if self._open else 0,
            self._reader.point_sampled,
        )
        attribution = self._attribution.families() if self._attribution is not None else []
        background = self.background.families()
        self.latest = Exposition([*families, *attribution, *own, *background], self._clock())

    # -- configuration ---------------------------------------------------------------------------------------

    def _maybe_reload(self) -> None:
        changed = self._source.changed()
        if not (self._reload_requested.is_set() or changed):
            return
        self._reload_requested.clear()
        try:
            loaded = self._source.load()
        except ConfigError as e:
            self.stats.reload_errors += 1
            log.error("counters not reloaded, the previous configuration stays: %s", e)
            return
        for warning in loaded.warnings:
            log.warning("%s", warning)
        self.counters = loaded
        self.stats.reloads += 1
        log.info(
            "counters reloaded from %s: %d fields, %d labels",
            self._source.description,
            len(loaded.counters),
            len(loaded.labels),
        )
