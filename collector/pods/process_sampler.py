"""Per-process GPU utilization of shared GPUs, sampled fast enough to catch every NVML sample.

NVML keeps about five utilization samples a second, each belonging to the process that held the GPU in that
~200 ms window, and ``nvmlDeviceGetProcessUtilization`` returns only the newest sample of each process. A 1 Hz poll
therefore sees one process at a time; this sampler polls every ``poll`` seconds (0.2 s), passing the last timestamp
seen, and keeps every sample of the last ``window`` seconds. A pod's share is a windowed quantity: see
``pods/attribution.py``.

A GPU whose reads have failed for 1.5 s, or that has not been read yet, has no window: an empty one would split its
utilization as 0 for every pod, which a busy GPU must never read as.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol

from collector.errors import NvmlReadError
from collector.nvml.reader import ProcessSample
from common.log_limit import LogLimit, left_out
from common.supervisor import Guard, Supervised

log = logging.getLogger(__name__)


class ProcessUtilizationReader(Protocol):
    def process_utilization(self, index: int, since_us: int) -> list[ProcessSample]: ...


class ProcessSampler:
    def __init__(
        self,
        reader: ProcessUtilizationReader,
        window: float = 10.0,
        poll: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        supervised: Supervised | None = None,
    ) -> None:
        """``supervised`` counts the polls that raised what nobody expected (the thread goes on)."""
        self._reader = reader
        self._guard = Guard("process-sampler", supervised)
        self.window = window
        self._poll = poll
        self._clock = clock
        self._gpus: tuple[int, ...] = ()
        self._last_seen: dict[int, int] = {}
        self._read_at: dict[int, float] = {}  # per GPU: when its last read that worked was made
        # a few failed polls in a row, not one, and off the whole seconds a 1 s cycle falls on
        self._fresh_for = max(1.5, 5 * poll)
        # per GPU: (arrival time, pid, NVML timestamp in µs, SM %), oldest first
        self._samples: dict[int, deque[tuple[float, int, int, float]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = False
        self._thread: threading.Thread | None = None  # the poll's, from the first shared GPU after start
        self.errors = 0
        self._log_limit = LogLimit(60.0, clock)

    def watch(self, gpus: Iterable[int]) -> None:
        """Poll exactly these GPUs (by index) from now on: the shared ones. The first one starts the polling thread
        once ``start`` has been called."""
        gpus = tuple(gpus)
        with self._lock:
            for index in set(self._gpus) - set(gpus):
                self._samples.pop(index, None)
                self._last_seen.pop(index, None)
                self._read_at.pop(index, None)
            self._gpus = gpus
            for index in gpus:
                self._samples.setdefault(index, deque())
            if gpus and self._started and self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="process-sampler", daemon=True)
                self._thread.start()

    def poll_once(self) -> None:
        with self._lock:
            gpus = self._gpus
        now = self._clock()
        for index in gpus:
            try:
                samples = self._reader.process_utilization(index, self._last_seen.get(index, 0))
            except NvmlReadError as e:
                self.errors += 1
                held = self._log_limit.allow(str(index))
                if held is not None:
                    log.warning(
                        "%s; the pods sharing it get no utilization share until it reads again%s",
                        e,
                        left_out(held, self._log_limit.interval),
                    )
                continue
            with self._lock:
                bucket = self._samples.get(index)
                if bucket is None:  # no longer shared
                    continue
                self._read_at[index] = now
                if not samples:  # no process ran since the last poll
                    continue
                last = self._last_seen.get(index, 0)
                seen = {(pid, ts) for _, pid, ts, _ in bucket}
                for s in samples:
                    key = (s.pid, s.timestamp_us)
                    if key not in seen:
                        bucket.append((now, s.pid, s.timestamp_us, s.sm_util))
                        seen.add(key)
                self._last_seen[index] = max(last, *(s.timestamp_us for s in samples))
                while bucket and bucket[0][0] < now - self.window:
                    bucket.popleft()

    def window_sums(self, index: int) -> dict[int, float] | None:
        """Sum of each process's SM % samples over the window (pid → sum); None while the GPU's reads fail or before
        the first one."""
        now = self._clock()
        cutoff = now - self.window
        with self._lock:
            read_at = self._read_at.get(index)
            if read_at is None or now - read_at > self._fresh_for:
                return None
            bucket = self._samples.get(index, deque())
            sums: dict[int, float] = {}
            for arrived, pid, _ts, util in bucket:
                if arrived >= cutoff:
                    sums[pid] = sums.get(pid, 0.0) + util
        return sums

    def start(self) -> None:
        """Poll from the first shared GPU on. Most nodes share none, and a thread costs its stack: under gVisor 2 MB
        resident from its first call (docs/collector-bench.md)."""
        self._started = True
        self.watch(self._gpus)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._gpus:
                self._guard.step(self.poll_once)
            self._stop.wait(self._poll)

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)
