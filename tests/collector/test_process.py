"""The collector as users run it: the console command, scraped by a real Prometheus server, reloaded by SIGHUP."""

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.processes import free_port
from harness.stores.prometheus import run_prometheus

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def collector(*args: str) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector", "-a", f"127.0.0.1:{port}", *args],
        cwd=ROOT,
        env={**os.environ, "NODE_NAME": "sim-node"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    # Logs go to a pipe that is only read on failure; a collector this short-lived writes far less than it holds.
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{url}/metrics", timeout=2) as resp:
                    if b"gpuscale_collector_collections_total 2" in resp.read():
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                out = proc.communicate()[0].decode()
                raise AssertionError(f"collector did not come up: {out}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


@pytest.mark.prometheus
def test_a_real_prometheus_scrapes_the_collector(tmp_path: Path) -> None:
    with (
        collector("--simulate-gpus", "2", "-c", "500", "--dcgm-names", "pre-4.9") as url,
        run_prometheus(tmp_path, [url.removeprefix("http://")], scrape_interval="1s") as prom,
    ):
        up = prom.wait_for('up{job="gpuscale-collector"} == 1')
        assert len(up) == 1
        util = prom.wait_for("DCGM_FI_DEV_GPU_UTIL", min_results=2)
        assert {r["metric"]["gpu"] for r in util} == {"0", "1"}
        assert {r["metric"]["Hostname"] for r in util} == {"sim-node"}
        assert all(0 <= float(r["value"][1]) <= 100 for r in util)
        ratios = prom.query("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
        assert len(ratios) == 2
        assert all(0 <= float(r["value"][1]) <= 1 for r in ratios)
        # the dcgm-exporter counter keeps its bare name and grows, so rate() over it works
        energy = prom.wait_for("rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[5s]) > 0", timeout=30, min_results=2)
        assert all(float(r["value"][1]) > 0 for r in energy)
        assert prom.query("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total") == []
        # the series an H200 does not support are absent, not zero
        assert prom.query("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL") == []
        assert prom.query("DCGM_FI_PROF_NVLINK_TX_BYTES") == []
        unsupported = prom.query('gpuscale_collector_field_unsupported{field="DCGM_FI_PROF_NVLINK_TX_BYTES"}')
        assert len(unsupported) == 2
        meta = prom.api("/api/v1/metadata", metric="DCGM_FI_DEV_GPU_UTIL")
        assert meta["DCGM_FI_DEV_GPU_UTIL"][0]["type"] == "gauge"
        assert meta["DCGM_FI_DEV_GPU_UTIL"][0]["help"].startswith("[simulated GPU]")


def test_sighup_reloads_the_counters_file_and_a_broken_one_is_refused(tmp_path: Path) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, util\n")
    with collector("--simulate-gpus", "1", "-c", "200", "-f", str(counters), "--slow-fields-interval", "200") as url:
        assert "DCGM_FI_DEV_GPU_TEMP{" not in get(f"{url}/metrics")
        counters.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, util\nDCGM_FI_DEV_GPU_TEMP, gauge, temp\n")
        pids = subprocess.run(["pgrep", "-f", str(counters)], capture_output=True, text=True).stdout.split()
        for pid in pids:
            os.kill(int(pid), signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "DCGM_FI_DEV_GPU_TEMP{" not in (body := get(f"{url}/metrics")):
            assert "DCGM_FI_DEV_GPU_UTIL{" in body  # never an empty or partial page in between
            assert time.monotonic() < deadline, "SIGHUP did not reload the counters file"
            time.sleep(0.1)
        counters.write_text("garbage without commas\n")
        for pid in pids:
            os.kill(int(pid), signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "gpuscale_collector_config_reload_errors_total 1" not in (body := get(f"{url}/metrics")):
            assert time.monotonic() < deadline, "the broken file was not reported"
            time.sleep(0.1)
        assert "DCGM_FI_DEV_GPU_TEMP{" in body


def test_a_missing_counters_file_stops_the_start_with_a_clear_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "collector", "--simulate-gpus", "1", "-f", str(tmp_path / "none.csv")],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert f"gpuscale-collector: error: counters file {tmp_path / 'none.csv'} does not exist" in result.stderr
    assert "Traceback" not in result.stderr
