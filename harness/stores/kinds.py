"""The metric stores the adapter is tested against, each a real server started as a plain process: Prometheus, and
VictoriaMetrics (single-node) scraping the same targets with the same scrape config.

A test runs against every store with ``@on_every_store`` (or ``pytestmark = on_every_store``): its ``store`` fixture
(tests/adapter/conftest.py) is then each server in turn; without it, ``store`` is Prometheus.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from harness.stores.prometheus import Prometheus, run_prometheus
from harness.stores.victoria_metrics import run_victoria_metrics

PROMETHEUS = "prometheus"
VICTORIA_METRICS = "victoria-metrics"
STORES = (PROMETHEUS, VICTORIA_METRICS)

on_every_store = pytest.mark.parametrize("store", STORES, indirect=True)


def run_store(kind: str, tmp: Path, scrape_targets: list[str]) -> AbstractContextManager[Prometheus]:
    """Start the store named ``kind`` scraping ``scrape_targets`` every second; stopped on exit."""
    if kind == PROMETHEUS:
        return run_prometheus(tmp, scrape_targets)
    if kind == VICTORIA_METRICS:
        return run_victoria_metrics(tmp, scrape_targets)
    raise ValueError(f"no such store: {kind!r} (one of {', '.join(STORES)})")
