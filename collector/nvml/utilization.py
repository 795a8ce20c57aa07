"""Utilization as a time average: NVML's utilization samples → the busy percentage of the last interval.

``nvmlDeviceGetUtilizationRates`` answers with one short sample (about 100 ms on an H200). Under a bf16 load busy
for half of every 0.2 s it read anything from 0 to 87 % from one second to the next, and a load busy for the first
quarter of every second read 0 % every time, as a 1 s poll locked phase with it. NVML also keeps a buffer of samples
(one per ~200 ms on the H200, ~14 s deep), each the busy percentage of its own window, and ``nvmlDeviceGetSamples``
returns those newer than a timestamp. Their mean over an interval is the busy fraction of that interval: 48.4 % and
24.2 % under those two loads, where GPM's hardware counters said 48.7 % and 24.3 %.

The value exported covers the last ``interval`` seconds of NVML's own clock, ending at the newest sample, and
weighs each sample by the part of its window inside that span. So every value covers the same length of GPU time,
whatever the collection thread's jitter: one second cut by the poll instead holds 4 or 6 samples now and then, and
the half-busy load with a 1 s period read 36 % and 57 % that way.

The memory-copy, encoder and decoder utilizations span ``engine_interval`` instead (5 s by default) and are read
once per span, so that their windows still tile NVML's clock (no second counted twice or left out) at a fraction
of the CPU: each read of a sample buffer costs NVML ~2.5 ms of CPU on an H200, whatever it returns.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable

from collector.nvml.api import Handle, Nvml
from collector.nvml.fields import SAMPLED_READINGS, SampledReading
from collector.nvml.readings import READINGS, typed_value
from common.median import median

log = logging.getLogger(__name__)

_DEFAULT_SPACING_US = 200_000  # the H200's; used until two samples show the GPU's own
_MAX_SAMPLES = 1024  # a bound whatever the timestamps do: 200 s of samples at the H200's rate


class SampleWindow:
    """The samples of one GPU and field that the current window needs; pure, fed by ``add``."""

    def __init__(self, span_us: int) -> None:
        self.span_us = span_us
        self.last_seen = 0  # newest timestamp (µs) taken in: the next read asks only for samples after it
        self._samples: deque[tuple[int, float]] = deque(maxlen=_MAX_SAMPLES)

    def add(self, samples: Iterable[tuple[int, float]]) -> int:
        """Take in samples (timestamp in µs, value); returns how many were new."""
        new = 0
        for ts, value in sorted(samples):
            if ts > self.last_seen:
                self._samples.append((ts, value))
                self.last_seen = ts
                new += 1
        start = self.last_seen - self.span_us
        # Keep one sample older than the window: its timestamp is where the next sample's window begins.
        while len(self._samples) >= 2 and self._samples[1][0] <= start:
            self._samples.popleft()
        return new

    def mean(self) -> float | None:
        """Time-weighted mean over (newest - span, newest]; None before the first sample."""
        if not self._samples:
            return None
        spacing = self._spacing()
        start = self.last_seen - self.span_us
        weighted = covered = 0.0
        previous: int | None = None
        for ts, value in self._samples:
            # A sample covers the time since the one before it; after a gap (samples NVML dropped), no more than
            # a usual window and a half (their spacing varies by a few ms), so that one sample does not stand for
            # seconds it never saw.
            begin = ts - spacing if previous is None else max(previous, ts - 3 * spacing // 2)
            previous = ts
            overlap = ts - max(begin, start)
            if overlap > 0:
                weighted += value * overlap
                covered += overlap
        return weighted / covered if covered else self._samples[-1][1]

    def _spacing(self) -> int:
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(self._samples) if b[0] > a[0]]
        return int(median(gaps)) if gaps else _DEFAULT_SPACING_US


class UtilizationSampler:
    """The sampled utilizations of one GPU; where the GPU keeps no samples, NVML's point value instead.

    ``read`` returns None for a field with no value this cycle: no sample yet, or no new one for three spans
    (a last known value for a while, then nothing; never a made-up one).
    """

    def __init__(
        self,
        nvml: Nvml,
        handle: Handle,
        interval: float,
        engine_interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``interval``: the span of the readings read every cycle; ``engine_interval`` (default: ``interval``)
        the span of the others. A value is served while its buffer gave a new sample within 3 spans (5 s at
        least)."""
        self._nvml = nvml
        self._handle = handle
        spans = {
            reading: interval if spec.every_cycle or engine_interval is None else engine_interval
            for reading, spec in SAMPLED_READINGS.items()
        }
        self._clock = clock
        # built once here: ``read`` runs every cycle for every GPU and sampled reading
        self._windows = {reading: SampleWindow(round(span * 1e6)) for reading, span in spans.items()}
        self._stale_after = {reading: max(5.0, 3 * span) for reading, span in spans.items()}
        self._fresh: dict[str, float] = {}  # reading → clock time of its newest new sample
        self.point: set[str] = set()  # fields served from the point value: the GPU keeps no samples of them

    def read(self, reading: str) -> dict[str, float] | None:
        spec = SAMPLED_READINGS[reading]
        if spec.field in self.point:
            return {spec.field: float(READINGS[spec.point](self._nvml, self._handle)[spec.field])}
        window = self._windows[reading]
        try:
            samples = self._samples(spec, window.last_seen)
        except self._nvml.NVMLError as e:
            if e.value not in (self._nvml.NVML_ERROR_NOT_SUPPORTED, self._nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                raise
            self.point.add(spec.field)
            log.info("%s: the GPU keeps no utilization samples; serving NVML's point value", spec.field)
            return self.read(reading)
        now = self._clock()
        if window.add(samples):
            self._fresh[reading] = now
        stale_after = self._stale_after[reading]
        if now - self._fresh.get(reading, now - stale_after - 1) > stale_after:
            return None
        mean = window.mean()
        return None if mean is None else {spec.field: round(mean, 2)}

    def _samples(self, spec: SampledReading, after: int) -> list[tuple[int, float]]:
        nvml = self._nvml
        try:
            value_type, samples = nvml.nvmlDeviceGetSamples(self._handle, getattr(nvml, spec.sampling_type), after)
        except nvml.NVMLError as e:
            if e.value == nvml.NVML_ERROR_NOT_FOUND:  # nothing newer than ``after``
                return []
            raise
        return [(int(s.timeStamp), typed_value(s.sampleValue, value_type)) for s in samples]
