"""How fresh a background source is (common/freshness.py): failing since when, stale past its bound, metrics."""

from __future__ import annotations

import logging

import pytest

from adapter.self_metrics import AdapterMetrics
from common.freshness import Timing


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_failing_counts_from_the_first_failure_until_a_success(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "common.freshness")
    metrics, clock = AdapterMetrics(), Clock()
    source = metrics.sources.add("authentication/configmap", 60.0, clock)
    assert source.check == "authentication"
    source.failed("HTTP 500 InternalError")
    clock.now += 30
    source.failed("HTTP 503")  # a later failure does not move the start
    assert source.failing_since == 100.0
    assert not source.stale()
    clock.now += 30
    assert source.problem() is None  # exactly the bound: not yet
    clock.now += 1
    assert source.problem() == "authentication/configmap failing for 61s (more than 60s): HTTP 503"
    assert source.stale()
    source.succeeded()
    # declared anew: mypy keeps the narrowing of failing_since from the assertion above across succeeded()
    state: tuple[float | None, str, bool] = (source.failing_since, source.error, source.stale())
    assert state == (None, "", False)
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert messages == [  # once each, however often it was asked
        (
            logging.WARNING,
            "authentication/configmap failing for 61s (more than 60s): HTTP 503; /readyz fails until it recovers",
        ),
        (logging.INFO, "authentication/configmap recovered after failing for 61 s"),
    ]


def test_the_metrics_show_the_last_success_and_staleness_of_each_source() -> None:
    metrics, clock = AdapterMetrics(), Clock()
    pods = metrics.sources.add("object-cache/pods", 60.0, clock)
    nodes = metrics.sources.add("object-cache/nodes", 60.0, clock)
    pods.succeeded()
    nodes.failed("refused")
    clock.now += 61
    sample = metrics.registry.get_sample_value
    assert sample("gpuscale_adapter_source_stale", {"source": "object-cache/pods"}) == 0
    assert sample("gpuscale_adapter_source_stale", {"source": "object-cache/nodes"}) == 1
    assert sample("gpuscale_adapter_source_last_success_timestamp_seconds", {"source": "object-cache/pods"}) == (
        pods.last_success
    )
    assert sample("gpuscale_adapter_source_last_success_timestamp_seconds", {"source": "object-cache/nodes"}) is None


def test_a_source_built_again_replaces_the_one_of_the_same_name() -> None:
    metrics = AdapterMetrics()
    first = metrics.sources.add("discovery", 60.0)
    second = metrics.sources.add("discovery", 120.0)
    assert list(metrics.sources) == [second]
    assert first is not second


@pytest.mark.parametrize(("interval", "bound"), [(0.0, 60.0), (5.0, 60.0), (60.0, 120.0), (600.0, 1200.0)])
def test_the_bound_is_a_minute_or_two_intervals(interval: float, bound: float) -> None:
    assert Timing().bound(interval) == bound
