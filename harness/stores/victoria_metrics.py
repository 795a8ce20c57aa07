"""A real VictoriaMetrics single-node server as a plain process on 127.0.0.1 with a temporary data dir, scraping the
targets it is given as the tests' Prometheus does (``-promscrape.config``: the same scrape config, honor_labels
included), so the series reach it by the path a deployment's do rather than through its import API.

Its answers are read with ``nocache=1``, as the adapter is told to (``adapter_url``): without it VictoriaMetrics
answers an instant query near now with the values of ``-search.latencyOffset`` (30 s) earlier, stamped with the time
asked (docs/adapter.md, "VictoriaMetrics, Thanos, Mimir").
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from harness.processes import free_port, server_process
from harness.stores.prometheus import Prometheus

FRESH = "nocache=1"


def victoria_metrics_binary() -> str:
    """``$VICTORIA_METRICS_BINARY``, else ``victoria-metrics`` on the PATH; a clear failure, never a skip, without."""
    path = os.environ.get("VICTORIA_METRICS_BINARY") or shutil.which("victoria-metrics")
    if path is None:
        raise RuntimeError(
            "the victoria-metrics binary is not installed; run scripts/ensure-victoria-metrics "
            "(apt-get install -y --no-install-recommends victoria-metrics)"
        )
    return path


class VictoriaMetrics(Prometheus):
    """The Prometheus querying API of a VictoriaMetrics server; every read asks for fresh values."""

    @property
    def adapter_url(self) -> str:
        return f"{self.url}/?{FRESH}"

    def api(self, path: str, **params: str) -> Any:
        return super().api(path, nocache="1", **params)


@contextmanager
def run_victoria_metrics(
    tmp: Path,
    scrape_targets: list[str] | None = None,
    scrape_interval: str = "1s",
    extra_args: list[str] | None = None,
    extra_jobs: list[dict[str, Any]] | None = None,
) -> Iterator[VictoriaMetrics]:
    """Start VictoriaMetrics scraping ``scrape_targets`` (host:port), and the scrape jobs of ``extra_jobs``, and stop
    it on exit."""
    port = free_port()
    config = {
        "global": {"scrape_interval": scrape_interval},
        "scrape_configs": [
            # named as the shipped collector job: the built-in GPU rules read only a GPU exporter's job
            {
                "job_name": "gpuscale-collector",
                "honor_labels": True,
                "static_configs": [{"targets": scrape_targets or []}],
            },
            *(extra_jobs or []),
        ],
    }
    tmp.mkdir(parents=True, exist_ok=True)
    config_path = tmp / "scrape.yml"
    config_path.write_text(yaml.safe_dump(config))
    log = tmp / "victoria-metrics.log"
    args = [
        victoria_metrics_binary(),
        f"-storageDataPath={tmp / 'victoria-metrics-data'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        f"-promscrape.config={config_path}",
        *(extra_args or []),
    ]
    url = f"http://127.0.0.1:{port}"
    with server_process("VictoriaMetrics", args, log, f"{url}/health") as process:
        yield VictoriaMetrics(url, process, log)
