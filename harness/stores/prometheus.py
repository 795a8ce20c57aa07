"""A real Prometheus server as a plain process on 127.0.0.1 with a temporary config and data dir (demo and tests)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from harness.processes import free_port, server_process


def prometheus_binary() -> str:
    """``$PROMETHEUS_BINARY``, else ``prometheus`` on the PATH, else ``.prom/prometheus`` (carried to GPU machines)."""
    path = os.environ.get("PROMETHEUS_BINARY") or shutil.which("prometheus")
    if path is None and os.access(".prom/prometheus", os.X_OK):
        path = os.path.abspath(".prom/prometheus")
    if path is None:
        raise RuntimeError(
            "the prometheus binary is not installed; run scripts/ensure-prometheus "
            "(apt-get install -y --no-install-recommends prometheus)"
        )
    return path


class Prometheus:
    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    @property
    def adapter_url(self) -> str:
        """What an adapter is given as --prometheus-url to read this server."""
        return self.url

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus answered {body}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        data = self.api("/api/v1/query", query=promql)
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_for(self, promql: str, timeout: float = 30.0, min_results: int = 1) -> list[dict[str, Any]]:
        """Poll ``promql`` until it returns at least ``min_results`` series; fail with Prometheus's log if not."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(promql)
            if len(result) >= min_results:
                return result
            time.sleep(0.25)
        targets = self.api("/api/v1/targets")
        raise AssertionError(
            f"{promql!r} returned {result} after {timeout}s; targets: {targets}; "
            f"log tail: {self.log.read_text()[-2000:]}"
        )


@contextmanager
def run_prometheus(
    tmp: Path,
    scrape_targets: list[str] | None = None,
    scrape_interval: str = "1s",
    extra_config: dict[str, Any] | None = None,
    extra_args: list[str] | None = None,
    extra_jobs: list[dict[str, Any]] | None = None,
    port: int | None = None,
    die_with_parent: bool = False,
) -> Iterator[Prometheus]:
    """Start Prometheus scraping ``scrape_targets`` (host:port), and the scrape jobs of ``extra_jobs``, and stop it on
    exit (and, with ``die_with_parent``, when this process is killed). ``port``: that of a Prometheus stopped before,
    to start it again where its clients look (default: a free one)."""
    port = port or free_port()
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {
                # named as the shipped collector job: the built-in GPU rules read only a GPU exporter's job
                "job_name": "gpuscale-collector",
                "honor_labels": True,
                "static_configs": [{"targets": scrape_targets or []}],
            },
            *(extra_jobs or []),
        ],
    }
    if extra_config:
        config.update(extra_config)
    tmp.mkdir(parents=True, exist_ok=True)
    config_path = tmp / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    data = tmp / "prometheus-data"
    log = tmp / "prometheus.log"
    args = [
        prometheus_binary(),
        f"--config.file={config_path}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-admin-api",
        *(extra_args or []),
    ]
    url = f"http://127.0.0.1:{port}"
    with server_process("Prometheus", args, log, f"{url}/-/ready", die_with_parent=die_with_parent) as process:
        yield Prometheus(url, process, log)
