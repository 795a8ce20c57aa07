from collections.abc import Callable

import pytest

from collector.collection import Collection
from collector.nvml.api import Nvml
from collector.nvml.reader import NvmlReader
from harness.node.nvml_trace import ReplayNvml


@pytest.fixture
def h200() -> ReplayNvml:
    """NVML as the real H200 answered, idle; ``.phase = "gemm"`` switches to answers recorded under a bf16 GEMM."""
    return ReplayNvml.load("h200", "idle")


@pytest.fixture
def make_collection() -> Callable[..., Collection]:
    def make(nvml: Nvml, counters_path: str | None = None, interval: float = 1.0, **kwargs: object) -> Collection:
        kwargs.setdefault("common_labels", (("Hostname", "node-a"),))
        reader = NvmlReader(nvml, slow_every=round(10.0 / interval), interval=interval)  # slow fields every 10 s
        return Collection(reader, counters_path, interval=interval, **kwargs)  # type: ignore[arg-type]

    return make
