"""Simulated GPUs whose load another program rewrites in a file (the demo's workload steers them this way)."""

import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from collector.errors import ConfigError
from collector.simulation.load_file import KEEP, LoadFile, parse_loads
from collector.simulation.spec import load_spec


def rewrite(path: Path, text: str) -> None:
    """As the demo writes it: a new file renamed over the old one (a new inode: seen even within one mtime tick)."""
    new = path.with_suffix(".new")
    new.write_text(text)
    os.replace(new, path)


def test_gpus_follow_the_file_from_when_a_rewrite_is_seen(tmp_path: Path) -> None:
    (tmp_path / "loads.yaml").write_text("{0: 0.5}")
    (tmp_path / "sim.yaml").write_text("gpus: 2\nload_file: loads.yaml\nload: {1: [[0, 0.3]]}\n")
    now = [100.0]
    nvml = load_spec(str(tmp_path / "sim.yaml")).build(clock=lambda: now[0])
    gpu0, gpu1 = nvml.nvmlDeviceGetHandleByIndex(0), nvml.nvmlDeviceGetHandleByIndex(1)
    now[0] += 10
    assert nvml.nvmlDeviceGetUtilizationRates(gpu0).gpu == 50
    assert nvml.nvmlDeviceGetUtilizationRates(gpu1).gpu == 30  # not in the file: the script

    rewrite(tmp_path / "loads.yaml", "{0: 0.9, 1: 0.1}")
    now[0] += 2
    # seen now, at 12 s: the point reading covers the 100 ms before, which keep the old load
    assert nvml.nvmlDeviceGetUtilizationRates(gpu0).gpu == 50
    now[0] += 1
    assert nvml.nvmlDeviceGetUtilizationRates(gpu0).gpu == 90
    assert nvml.nvmlDeviceGetUtilizationRates(gpu1).gpu == 10
    # the windows sampled before the rewrite was seen keep their load; the ones after have the new one
    _, samples = nvml.nvmlDeviceGetSamples(gpu0, nvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    # NVML's value union, which the simulation builds as a namespace
    values = [cast(SimpleNamespace, s.sampleValue).uiVal for s in samples]
    assert values[-1] == 90
    assert 50 in values[:-5]
    assert sorted(set(values)) == [50, 90]


def test_a_bad_rewrite_keeps_the_last_good_loads_and_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "loads.yaml"
    path.write_text("{0: 0.4}")
    now = [0.0]
    curve = LoadFile(path, 2, lambda index, t: 0.0, clock=lambda: now[0])
    rewrite(path, "{0: 1.5}")
    now[0] = 1.0
    with caplog.at_level(logging.WARNING):
        assert curve(0, 1.0) == 0.4
    assert f"{path}: load of GPU 0 must be from 0 to 1, got 1.5; keeping the previous loads" in caplog.text
    path.unlink()
    now[0] = 2.0
    assert curve(0, 2.0) == 0.4
    assert "cannot be read" in caplog.text


def test_old_changes_are_forgotten_but_the_oldest_kept_loads_stand_for_the_past(tmp_path: Path) -> None:
    path = tmp_path / "loads.yaml"
    path.write_text("{0: 0.1}")
    now = [0.0]
    curve = LoadFile(path, 1, lambda index, t: 0.0, clock=lambda: now[0])
    for step in range(1, 5):
        rewrite(path, f"{{0: {step / 10}}}")
        now[0] = step * KEEP
        assert curve(0, now[0]) == step / 10
    # changes older than KEEP are gone; the oldest load kept (set at 2 x KEEP) answers for everything before it
    assert curve(0, 0.0) == 0.2
    assert curve(0, 3.5 * KEEP) == 0.3


def test_a_load_file_missing_at_start_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "sim.yaml").write_text("gpus: 1\nload_file: none.yaml\n")
    spec = load_spec(str(tmp_path / "sim.yaml"))
    assert spec.load_file == str(tmp_path / "none.yaml")
    with pytest.raises(ConfigError, match=r"load file .*none\.yaml cannot be read"):
        spec.build()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[0.5]", "expected a mapping of GPU index to load, got [0.5]"),
        ("{2: 0.5}", "GPU index must be from 0 to 1, got 2"),
        ("{gpu0: 0.5}", "GPU index must be from 0 to 1, got 'gpu0'"),
        ("{0: -0.1}", "load of GPU 0 must be from 0 to 1, got -0.1"),
        ("{0: busy}", "load of GPU 0 must be from 0 to 1, got 'busy'"),
        ("{0: true}", "load of GPU 0 must be from 0 to 1, got True"),
        ("{0: [", "not YAML"),
    ],
)
def test_bad_load_files_name_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_loads(text, "loads.yaml", gpus=2)
    assert str(caught.value).startswith(f"loads.yaml: {message}")


def test_an_empty_load_file_leaves_every_gpu_to_the_script() -> None:
    assert parse_loads("", "loads.yaml", gpus=2) == {}
    assert parse_loads("{0: 1, 1: 0}", "loads.yaml", gpus=2) == {0: 1.0, 1: 0.0}
