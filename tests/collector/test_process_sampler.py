"""The process sampler's thread: none until a GPU is shared, one from then on, none after stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from collector.nvml.reader import ProcessSample
from collector.pods.process_sampler import ProcessSampler


class Polled:
    """Per-process reads that find no process, and say which GPUs were asked about."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def process_utilization(self, index: int, since_us: int) -> list[ProcessSample]:
        self.asked.append(index)
        return []


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "process-sampler" and t.is_alive()]


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_no_thread_until_a_gpu_is_shared_then_one_until_stop() -> None:
    reader = Polled()
    sampler = ProcessSampler(reader, poll=0.01)
    sampler.start()
    try:
        sampler.watch([])
        time.sleep(0.05)
        assert sampler_threads() == []
        assert reader.asked == []
        sampler.watch([3])
        assert wait_for(lambda: 3 in reader.asked)
        sampler.watch([3, 5])
        assert wait_for(lambda: 5 in reader.asked)
        assert len(sampler_threads()) == 1
        sampler.watch([])  # no longer shared: the thread stays, polling nothing
        del reader.asked[:]
        time.sleep(0.05)
        assert reader.asked == []
    finally:
        sampler.stop()
    assert sampler_threads() == []


def test_a_gpu_shared_before_start_is_polled_from_start_and_none_after_stop() -> None:
    reader = Polled()
    sampler = ProcessSampler(reader, poll=0.01)
    sampler.watch([1])
    time.sleep(0.05)
    assert sampler_threads() == []
    sampler.start()
    try:
        assert wait_for(lambda: 1 in reader.asked)
    finally:
        sampler.stop()
    sampler.watch([2])
    time.sleep(0.05)
    assert sampler_threads() == []
    assert 2 not in reader.asked
