"""A line every interval while the engine runs: what arrived, the queue, the batch, KV use, TTFT, throughput."""

from __future__ import annotations

from typing import TextIO

from .scheduler import Scheduler
from .totals import Totals


class Progress:
    def __init__(self, out: TextIO, interval: float = 5.0) -> None:
        self._out = out
        self.interval = interval
        self._last = Totals()
        self._last_t = 0.0
        self.next_line = interval

    def tick(self, t: float, scheduler: Scheduler, totals: Totals) -> None:
        """Called after every step and idle wait at ``t`` seconds into the run; writes a line once an interval ended."""
        if t < self.next_line:
            return
        seconds = t - self._last_t
        last, self._last, self._last_t = self._last, totals.copy(), t
        while self.next_line <= t:
            self.next_line += self.interval
        firsts = totals.ttft_count - last.ttft_count
        ttft = f"{1000 * (totals.ttft_sum - last.ttft_sum) / firsts:.0f} ms" if firsts else "-"
        tokens = (totals.generation_tokens - last.generation_tokens) / seconds
        busy = 100 * (totals.busy_seconds - last.busy_seconds) / seconds
        self._out.write(
            f"{t:7.1f} s: {totals.arrivals - last.arrivals} arrived, waiting {scheduler.waiting}, running "
            f"{scheduler.running}, KV {100 * scheduler.kv_usage:.1f} %, TTFT mean {ttft}, {tokens:.0f} tokens/s, "
            f"busy {busy:.0f} %\n"
        )
        self._out.flush()
