"""Per-process GPU utilization of shared GPUs, sampled fast enough to catch every NVML sample.

NVML keeps about five utilization samples a second, each belonging to the process that held the GPU in that
~200 ms window, and ``nvmlDeviceGetProcessUtilization`` returns only the newest sample of each process. A 1 Hz poll
therefore sees one process at a time; this sampler polls every ``poll`` seconds (0.2 s), passing the last timestamp
seen, and keeps every sample of the last ``window`` seconds. A pod's share is a windowed quantity: see
``attribution.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class ProcessSampler:
    def __init__(
        self,
        nvml: Any,
        window: float = 10.0,
        poll: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nvml = nvml
        self.window = window
        self._poll = poll
        self._clock = clock
        self._handles: dict[int, Any] = {}
        self._last_seen: dict[int, int] = {}
        # per GPU: (arrival time, pid, NVML timestamp in µs, SM %), oldest first
        self._samples: dict[int, deque[tuple[float, int, int, float]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0

    def watch(self, handles: dict[int, Any]) -> None:
        """Poll exactly these GPUs (index → NVML handle) from now on: the shared ones."""
        with self._lock:
            for index in set(self._handles) - set(handles):
                self._samples.pop(index, None)
                self._last_seen.pop(index, None)
            self._handles = dict(handles)
            for index in handles:
                self._samples.setdefault(index, deque())

    def poll_once(self) -> None:
        with self._lock:
            handles = dict(self._handles)
        now = self._clock()
        for index, handle in handles.items():
            try:
                samples = self._nvml.nvmlDeviceGetProcessUtilization(handle, self._last_seen.get(index, 0))
            except self._nvml.NVMLError as e:
                if e.value != self._nvml.NVML_ERROR_NOT_FOUND:  # NotFound: no process ran since the last poll
                    self.errors += 1
                continue
            with self._lock:
                bucket = self._samples.get(index)
                if bucket is None:
                    continue
                last = self._last_seen.get(index, 0)
                seen = {(pid, ts) for _, pid, ts, _ in bucket}
                for s in samples:
                    key = (int(s.pid), int(s.timeStamp))
                    if key not in seen:
                        bucket.append((now, key[0], key[1], float(s.smUtil)))
                        seen.add(key)
                if samples:
                    self._last_seen[index] = max(last, *(int(s.timeStamp) for s in samples))
                while bucket and bucket[0][0] < now - self.window:
                    bucket.popleft()

    def window_sums(self, index: int) -> dict[int, float]:
        """Sum of each process's SM % samples over the window (pid → sum)."""
        cutoff = self._clock() - self.window
        with self._lock:
            bucket = self._samples.get(index, deque())
            sums: dict[int, float] = {}
            for arrived, pid, _ts, util in bucket:
                if arrived >= cutoff:
                    sums[pid] = sums.get(pid, 0.0) + util
        return sums

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="process-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._handles:
                self.poll_once()
            self._stop.wait(self._poll)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
