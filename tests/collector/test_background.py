"""The collector's background work under supervision: a cycle or a task that fails unexpectedly is logged, counted
and run again, and a source failing past its bound turns /health to 503 with the reason."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from collector.cli import Node, background_work, build_node
from collector.collection import Collection
from collector.counters.configmap import ConfigMapCounters, ConfigMapRef
from collector.kube.config import KubeAccess
from collector.nvml.reader import CycleResult, NvmlReader
from collector.self_metrics import Background
from collector.server import answer_for
from collector.settings import parse_settings
from collector.simulation.nvml import SimulatedNvml
from collector.web.messages import Answer
from harness.node.nvml_trace import ReplayNvml
from harness.node.served import Served


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FailingOnce(NvmlReader):
    """A reader whose second read raises what no NVML error handler expects (a bug, a library surprise)."""

    reads = 0

    def read(self, *args: object, **kwargs: object) -> CycleResult:
        self.reads += 1
        if self.reads == 2:
            raise ZeroDivisionError("division by zero")
        return super().read(*args, **kwargs)  # type: ignore[arg-type]


def test_a_cycle_that_raises_is_logged_counted_and_the_collection_goes_on(
    h200: ReplayNvml, caplog: pytest.LogCaptureFixture
) -> None:
    reader = FailingOnce(h200)
    collection = Collection(reader, None, interval=0.01)
    collection.start()
    try:
        deadline = time.monotonic() + 10
        while collection.stats.collections < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        collection.stop()
    assert collection.stats.collections >= 3  # the thread went on after the failure
    (line,) = [r for r in caplog.records if r.name == "common.supervisor"]
    assert line.levelno == logging.ERROR
    assert line.getMessage() == "collection failed (ZeroDivisionError: division by zero); trying again next round"
    text = collection.latest.text().decode()
    assert 'gpuscale_collector_background_restarts_total{task="collection"} 1' in text
    assert 'gpuscale_collector_source_stale{source="collection"} 0' in text


async def health(client: Served) -> tuple[int, str]:
    status, _, text = await client.get("/health")
    return status, text


async def test_health_fails_while_a_source_has_been_failing_past_its_bound(
    serve: Callable[[Answer], Awaitable[Served]], h200: ReplayNvml
) -> None:
    background, clock = Background(), Clock()
    pods = background.sources.add("pod-directory", 60.0, clock)
    collection = Collection(NvmlReader(h200), None, background=background)
    collection.run_once()
    client = await serve(answer_for(collection))
    assert await health(client) == (200, "collecting 1 GPU(s)\n")
    pods.failed("Kubernetes API failed (HTTP503: 503 Service Unavailable)")
    clock.now += 60
    assert (await health(client))[0] == 200  # exactly the bound: not yet
    clock.now += 15
    assert await health(client) == (
        503,
        "collecting 1 GPU(s)\n"
        "pod-directory failing for 75s (more than 60s): Kubernetes API failed (HTTP503: 503 Service Unavailable)\n",
    )
    collection.run_once()
    assert 'gpuscale_collector_source_stale{source="pod-directory"} 1' in collection.latest.text().decode()
    pods.succeeded()
    assert (await health(client))[0] == 200


def test_every_background_task_is_supervised_and_reports_its_source(tmp_path: Path) -> None:
    settings = parse_settings(
        ["-k", "--kubernetes-enable-dra", "--enable-gpu-bind-unbind-watch", "--dump-enabled",
         "--dump-directory", str(tmp_path), "--simulate-gpus", "1"],
        env={"NODE_NAME": "node-a"},
    )  # fmt: skip
    nvml, background = SimulatedNvml(1), Background()
    counters = ConfigMapCounters(
        ConfigMapRef("gpuscale", "counters"), KubeAccess(), 30.0, source=background.sources.add("x", 60)
    )
    node: Node = build_node(settings, nvml, True, background=background)
    works, served = background_work(settings, node, counters, nvml)
    assert served is not None  # --dump-enabled hears of every answer
    work = {w.name: w for w in works}
    assert sorted(work) == ["counters-configmap", "debug-dumps", "dra-resource-slices", "gpu-bind-watch",
                            "pod-directory", "pod-resources"]  # fmt: skip
    assert node.watcher is not None
    assert work["pod-resources"].source is node.watcher.source
    assert node.watcher.source is not None
    assert node.watcher.source.name == "pod-resources"
    assert work["pod-directory"].source is not None
    assert work["pod-directory"].source.name == "pod-directory"
    assert node.slices is not None
    assert work["dra-resource-slices"].source is node.slices.source
    assert work["counters-configmap"].source is counters.source
    assert work["gpu-bind-watch"].source is not None
    names = {source.name for source in background.sources}
    assert {"collection", "pod-resources", "pod-directory", "dra-resource-slices", "gpu-bind-watch"} <= names
