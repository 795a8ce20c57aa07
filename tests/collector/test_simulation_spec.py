from pathlib import Path

import pytest
import yaml

from collector.errors import ConfigError
from collector.simulation.spec import load_spec, parse_spec
from harness.node.collector_process import running_collector

SPEC = """
gpus: 4
mig: {3: [1g.18gb, 3g.71gb]}
processes: {1: {501: 0.6, 502: 0.3}}
load: {0: [[0, 0.05], [20, 0.95], [60, 0.95], [70, 0.05]]}
repeat: 90
"""


def test_a_spec_builds_gpus_that_follow_the_script(tmp_path: Path) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text(SPEC)
    spec = load_spec(str(path))
    curve = spec.curve()
    assert curve(0, 0) == 0.05
    assert curve(0, 10) == pytest.approx(0.5)
    assert curve(0, 40) == 0.95
    assert curve(0, 65) == pytest.approx(0.5)
    assert curve(0, 80) == 0.05
    assert curve(0, 90 + 40) == 0.95  # repeats
    now = [0.0]
    nvml = spec.build(clock=lambda: now[0])
    gpu0, gpu1, gpu3 = (nvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1, 3))
    now[0] = 40.0
    assert nvml.nvmlDeviceGetUtilizationRates(gpu0).gpu == 95
    assert nvml.nvmlDeviceGetUtilizationRates(gpu1).gpu == 90  # the processes' shares
    assert nvml.nvmlDeviceGetMigMode(gpu3)[0] == 1
    assert {p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(gpu1)} == {501, 502}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus: 0", "'gpus' must be a whole number from 1 to 64, got 0"),
        ("gpus: 2\nfoo: 1", "unknown key 'foo'"),
        ("gpus: 2\nmig: {2: [1g.18gb]}", "mig: GPU index must be from 0 to 1, got 2"),
        ("gpus: 2\nmig: {0: [big]}", "mig.0: profile must look like 1g.18gb, got 'big'"),
        ("gpus: 2\nprocesses: {0: {1: 0.7, 2: 0.7}}", "processes.0: shares must be >= 0 and add up to at most 1"),
        ("gpus: 2\nload: {0: [[0, 2]]}", "load.0: loads must be within 0..1 and times ascending"),
        ("gpus: 2\nload: {0: [[10, 0.1], [0, 0.2]]}", "load.0: loads must be within 0..1 and times ascending"),
        ("gpus: 2\nload: {0: [1, 2]}", "load.0: expected a list of [seconds, load] pairs"),
        ("gpus: 2\nrepeat: -1", "'repeat' must be a positive number of seconds"),
        ("- just a list", "expected a mapping with 'gpus'"),
    ],
)
def test_bad_specs_name_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^sim.yaml: " + message.replace("[", r"\[").replace("(", r"\(")):
        parse_spec(yaml.safe_load(text), "sim.yaml")


def test_a_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_spec(str(tmp_path / "none.yaml"))


def test_simulated_gpus_say_so_at_start_and_a_sigterm_says_it_stopped(tmp_path: Path) -> None:
    log = tmp_path / "collector.log"
    with running_collector("--simulate-gpus", "1", log=log):
        pass  # stopped with SIGTERM on exit
    said = log.read_text()
    assert "simulated NVML started (no GPU driver is used): driver " in said
    assert "INFO collector.nvml.reader: NVML started" not in said
    assert said.rstrip().endswith("INFO collector: stopped")
