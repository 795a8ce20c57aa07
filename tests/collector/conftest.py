from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest

from collector.collection import Collection
from collector.counters.source import CountersFile
from collector.nvml.api import Nvml
from collector.nvml.reader import NvmlReader
from collector.web.messages import Answer
from collector.web.server import HttpServer
from harness.node.nvml_trace import ReplayNvml
from harness.node.served import Served


@pytest.fixture
def h200() -> ReplayNvml:
    """NVML as the real H200 answered, idle; ``.phase = "gemm"`` switches to answers recorded under a bf16 GEMM."""
    return ReplayNvml.load("h200", "idle")


@pytest.fixture
def make_collection() -> Callable[..., Collection]:
    def make(nvml: Nvml, counters_path: str | None = None, interval: float = 1.0, **kwargs: object) -> Collection:
        kwargs.setdefault("common_labels", (("Hostname", "node-a"),))
        reader = NvmlReader(nvml, slow_every=round(10.0 / interval), interval=interval)  # slow fields every 10 s
        # without a file: the built-in counters in dcgm-exporter 4.8's names (DCGM_FI_DEV_GPU_UTIL in %), which these
        # tests read; the 4.10 names are tested in test_counters.py and test_dcgm_exporter_contract.py
        counters = counters_path if counters_path is not None else CountersFile(None, "pre-4.9")
        return Collection(reader, counters, interval=interval, **kwargs)  # type: ignore[arg-type]

    return make


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Answer], Awaitable[Served]]]:
    """Serves an answer (``collector.server.answer_for``) until the test ends."""
    started: list[Served] = []

    async def start(answer: Answer) -> Served:
        server = HttpServer(answer, "127.0.0.1", 0)
        await server.start()
        started.append(Served(server, aiohttp.ClientSession()))
        return started[-1]

    yield start
    for served in started:
        await served.session.close()
        await served.server.stop()
