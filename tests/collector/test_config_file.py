"""``--config-file``: dcgm-exporter's YAML configuration, read as its 4.8.4 loader reads it
(NVIDIA/dcgm-exporter ``internal/pkg/appconfig/yaml_config.go`` at fafd151, version 1 as at 7ad5832)."""

import subprocess
import sys
from pathlib import Path

import pytest

from collector.config_file import parse_config_file
from collector.errors import ConfigError
from collector.settings import parse_settings
from harness.node.collector_process import running_collector, scrape

V2 = """\
version: 2
metrics:
  fields:
    - name: DCGM_FI_DEV_GPU_UTIL_RATIO
      prometheusType: gauge
      help: GPU utilization, as a 0-1 ratio.
    - name: DCGM_FI_DEV_GPU_TEMP
      prometheusType: gauge
      help: GPU temperature (in C).
collections:
  - name: default
    every: 500ms
    metrics:
      include: ["*"]
  - name: slow-ecc
    every: 10m
    metrics:
      include: [DCGM_FI_DEV_ECC_*]
server:
  maxConcurrentScrapes: 4
"""


def test_a_v2_file_sets_the_counters_and_the_interval_and_a_flag_wins(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(V2)
    settings = parse_settings(["--config-file", str(path)], {})
    assert settings.interval == 0.5
    assert settings.inline_counters is not None
    assert "DCGM_FI_DEV_GPU_UTIL_RATIO" in settings.inline_counters
    assert "server.maxConcurrentScrapes" in settings.config_without_effect
    assert parse_settings(["--config-file", str(path), "-c", "2000"], {}).interval == 2.0
    assert parse_settings(["-f", "/x.csv"], {"DCGM_EXPORTER_CONFIG_FILE": str(path)}).inline_counters is None


def test_a_v1_file_as_4_8_3_writes_it() -> None:
    config = parse_config_file(
        "version: 1\nmetrics:\n  file: /etc/dcgm-exporter/default-counters.csv\ncollection:\n  interval: 45s\n"
        "sources:\n  dcgm:\n    detectBindUnbind:\n      enabled: true\n      pollInterval: 2s\n",
        "c.yaml",
    )
    assert (config.collectors, config.interval_ms, config.bind_watch, config.bind_poll_interval) == (
        "/etc/dcgm-exporter/default-counters.csv", 45_000, True, 2.0)  # fmt: skip


@pytest.mark.parametrize(
    ("text", "error"),
    [  # dcgm-exporter's own table (yaml_config_test.go), and the v1/v2 keys each version refuses
        ("version: 1\nunknown: true\n", "field unknown not found"),
        ("metrics:\n  file: /tmp/c.csv\n", "version must be 1 or 2"),
        (
            "version: 1\nmetrics:\n  file: /a.csv\n  fields:\n    - {name: A, prometheusType: gauge, help: h}\n",
            "exactly one of file or fields",
        ),
        (
            "version: 1\nmetrics:\n  fields:\n    - {name: A, prometheusType: gauge, help: h}\n"
            "    - {name: A, prometheusType: counter, help: h}\n",
            "duplicates metrics.fields[0]",
        ),
        ("version: 1\nmetrics:\n  file: /a.csv\n  file: /b.csv\n", "duplicate YAML key"),
        ("version: 1\n? [metrics]\n: value\n", "mapping keys must be scalar"),
        ("version: 1\ncollection:\n  interval: 30000\n", "not a duration"),
        ("version: 1\ncollection:\n  interval: 500us\n", "whole milliseconds"),
        ("version: 1\ncollection:\n  watchGroups:\n    - name: slow\n      interval: 10m\n", "must not be empty"),
        ("version: 1\n---\nversion: 1\n", "multiple YAML documents"),
        ("version: 2\ncollection:\n  interval: 1s\n", "field collection not found"),
        ("version: 1\ncollections: []\n", "field collections not found"),
        ("version: 2\ncollections: []\n", "at least one collection"),
        ("version: 2\nserver:\n  maxConcurrentScrapes: 0\n", "greater than 0"),
    ],
)
def test_bad_files_are_refused_naming_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config_file(text, "c.yaml")
    assert error in str(e.value)


def test_a_bad_file_stops_the_start_with_status_2(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("version: 3\n")
    run = subprocess.run([sys.executable, "-m", "collector", "--config-file", str(path), "--simulate-gpus", "1"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 2
    assert f"config file {path}: version must be 1 or 2" in run.stderr
    assert "Traceback" not in run.stderr


def test_the_collector_serves_the_fields_a_v2_file_lists(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(V2)
    log = tmp_path / "collector.log"
    with running_collector("--simulate-gpus", "1", env={"DCGM_EXPORTER_CONFIG_FILE": str(path)}, log=log) as url:
        body = scrape(url)[0]
    served = {line.split("{")[0] for line in body.splitlines() if line.startswith("DCGM_")}
    assert served == {"DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_GPU_TEMP"}
    assert "GPU utilization, as a 0-1 ratio." in body  # the help the file gives
    ratios = [float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL_")]
    assert ratios
    assert all(0 <= r <= 1 for r in ratios)
    assert "server.maxConcurrentScrapes is accepted and has no effect" in log.read_text()
