"""dcgm-exporter's other flags: --version, -r and the host label, the served format, and the flags accepted without
effect, each of which must say truly why."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from collector.exposition import wants_openmetrics
from collector.settings import parse_settings, remote_host
from harness.node.collector_process import ROOT, running_collector, scrape
from harness.stores.prometheus import run_prometheus

PROMETHEUS_ACCEPT = (  # what Prometheus 2.x sends with every scrape
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@pytest.mark.parametrize("flag", ["--version", "-v"])
def test_version_prints_and_exits_0(flag: str) -> None:
    result = subprocess.run([sys.executable, "-m", "collector", flag], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.startswith("gpuscale-collector version ")
    assert result.stdout.split()[-1][0].isdigit()


@pytest.mark.parametrize(
    ("text", "host"),
    [("localhost:5555", "localhost"), ("dcgm.example:5555", "dcgm.example"), ("[::1]:5555", "::1"),
     ("10.0.0.7:5555", "10.0.0.7"), ("node-7", "node-7"), ("::1", "::1"), ("[::1]", "[::1]")],
)  # fmt: skip
def test_remote_host_is_read_as_go_splits_host_and_port(text: str, host: str) -> None:
    assert remote_host(text) == host


def test_r_sets_the_host_label_outside_kubernetes_only() -> None:
    env = {"NODE_NAME": "node-a"}
    assert parse_settings(["-r", "gpu-host:5555"], env=env).hostname == "gpu-host"
    assert parse_settings(["-r", "gpu-host:5555", "-k"], env=env).hostname == "node-a"
    assert parse_settings(["-r", "gpu-host:5555", "-n"], env=env).hostname is None
    assert parse_settings([], env={**env, "DCGM_REMOTE_HOSTENGINE_INFO": "h2:5555"}).hostname == "h2"
    assert parse_settings([], env=env).hostname == "node-a"


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        (PROMETHEUS_ACCEPT, False),
        ("", False),
        ("*/*", False),
        ("text/plain", False),
        ("application/openmetrics-text;version=1.0.0", True),
        ("application/openmetrics-text; version=1.0.0, text/plain;q=0", True),
        ("application/openmetrics-text;q=0, text/plain", False),
        ("application/json", False),
    ],
)
def test_text_is_served_to_every_client_that_accepts_it(accept: str, openmetrics: bool) -> None:
    assert wants_openmetrics(accept) is openmetrics


@pytest.mark.prometheus
def test_a_real_prometheus_stores_dcgm_counters_as_counters_and_reads_the_remote_host(tmp_path: Path) -> None:
    log = tmp_path / "collector.log"
    with (
        running_collector(
            "--simulate-gpus",
            "1",
            "-c",
            "500",
            "-r",
            "gpu-host-7:5555",
            "--hostname-label",
            "hostname",
            "--dcgm-names",
            "pre-4.9",
            log=log,
        ) as url,  # fmt: skip
        run_prometheus(tmp_path / "prom", [url.removeprefix("http://")], scrape_interval="1s") as prom,
    ):
        body, content_type = scrape(url, PROMETHEUS_ACCEPT)
        assert content_type == "text/plain; version=0.0.4; charset=utf-8"
        assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in body
        util = prom.wait_for("DCGM_FI_DEV_GPU_UTIL")
        assert util[0]["metric"]["hostname"] == "gpu-host-7"
        assert "Hostname" not in util[0]["metric"]
        prom.wait_for("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        meta = prom.api("/api/v1/metadata")
        for counter in ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"):
            assert meta[counter][0]["type"] == "counter", meta[counter]
        assert meta["DCGM_FI_DEV_GPU_UTIL"][0]["type"] == "gauge"
    assert (
        "-r gpu-host-7:5555: GPUs are read through this machine's NVML, not from a DCGM host engine there; the "
        "hostname label is 'gpu-host-7', as dcgm-exporter sets it" in log.read_text()
    )


def test_flags_without_effect_are_accepted_and_each_says_why(tmp_path: Path) -> None:
    log = tmp_path / "collector.log"
    with running_collector(
        "--simulate-gpus", "1", "-c", "200", "--enable-pprof", "-s", "f", "-p", "f", "--enable-dcgm-log",
        "--dcgm-log-level", "DEBUG", "--fake-gpus", "--web-systemd-socket", "-o", "-r", "h:5555",
        env={"DISABLE_STARTUP_VALIDATE": "true"}, log=log,
    ) as url:  # fmt: skip
        body, _ = scrape(url)
        assert 'uuid="GPU-' in body  # -o acts
        assert 'Hostname="h"' in body  # -r acts
    text = log.read_text()
    said = {line.split(" is accepted and has no effect: ")[0].rsplit(" ", 1)[-1]: line
            for line in text.splitlines() if " is accepted and has no effect: " in line}  # fmt: skip
    assert set(said) == {
        "--enable-pprof", "--switch-devices", "--cpu-devices", "--enable-dcgm-log", "--dcgm-log-level",
        "--fake-gpus", "--web-systemd-socket", "--disable-startup-validate",
    }  # fmt: skip
    assert "Go runtime profiles" in said["--enable-pprof"]
    assert "libdcgm.so.4" in said["--disable-startup-validate"]
    assert "NVSwitches" in said["--switch-devices"]
    assert "CPUs" in said["--cpu-devices"]
    assert "no DCGM library is loaded" in said["--enable-dcgm-log"]
    assert "socket activation is not supported" in said["--web-systemd-socket"]


def test_flags_are_read_as_go_reads_them_one_dash_or_two() -> None:
    # dcgm-exporter's flags go through Go's flag package: -debug is --debug (not -d ebug), --f is -f
    env = {"NODE_NAME": "node-a"}
    settings = parse_settings(["-debug", "-address", ":9500", "-collectors", "/x.csv", "-kubernetes=false"], env=env)
    assert (settings.debug, settings.address, settings.collectors) == (True, ("", 9500), "/x.csv")
    assert parse_settings(["--f", "/y.csv", "--a=:9600"], env=env).collectors == "/y.csv"
    assert parse_settings(["--a=:9600"], env=env).address == ("", 9600)


def test_slice_flags_given_twice_keep_both_values_and_an_empty_variable_is_one_not_set() -> None:
    env = {"NODE_NAME": "node-a", "DCGM_EXPORTER_INTERVAL": "", "DCGM_EXPORTER_KUBERNETES": ""}
    settings = parse_settings(["--nvidia-resource-names", "a", "--nvidia-resource-names", "b,c"], env=env)
    assert settings.resource_names == ("a", "b", "c")
    assert settings.interval == parse_settings([], env={"NODE_NAME": "node-a"}).interval  # urfave skips ""
    allow = "--kubernetes-pod-label-allowlist-regex"
    patterns = parse_settings([allow, "^app", allow, "^team"], env=env).pod_label_allowlist
    assert [p.pattern for p in patterns] == ["^app", "^team"]


@pytest.mark.parametrize("spelling", ["-rbmn", "--rbmn", "--replace-blanks-in-model-name", "-rbmn=true"])
def test_replace_blanks_is_taken_in_every_spelling_docs_collector_md_names(spelling: str) -> None:
    # dcgm-exporter declares -rbmn with one dash; Go reads it with two as well. Both once ended with "unknown flag".
    with running_collector("--simulate-gpus", "1", "-c", "200", spelling) as url:
        body, _ = scrape(url)
    assert 'modelName="NVIDIA-H200"' in body
    assert 'modelName="NVIDIA H200"' not in body


def test_model_names_keep_their_blanks_without_rbmn() -> None:
    with running_collector("--simulate-gpus", "1", "-c", "200") as url:
        body, _ = scrape(url)
    assert 'modelName="NVIDIA H200"' in body


@pytest.mark.parametrize("given", [["--log-format", "json"], ["-log-format=json"]])
def test_log_format_json_writes_each_record_as_one_json_object(tmp_path: Path, given: list[str]) -> None:
    log = tmp_path / "collector.log"
    with running_collector("--simulate-gpus", "1", "-c", "200", *given, log=log):
        pass
    records = [json.loads(line) for line in log.read_text().splitlines() if line]
    assert any("SIMULATED GPUs" in r["msg"] and r["level"] == "warning" for r in records), records


def test_debug_logs_debug_records_and_without_it_none_are_written(tmp_path: Path) -> None:
    logs = {}
    for given in (["--debug"], []):
        logs[bool(given)] = tmp_path / f"collector-{bool(given)}.log"
        with running_collector("--simulate-gpus", "1", "-c", "200", *given, log=logs[bool(given)]):
            pass
    assert " DEBUG " in logs[True].read_text()
    assert " DEBUG " not in logs[False].read_text()


def test_fallback_simulated_gpus_serves_them_when_nvml_cannot_start(tmp_path: Path) -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML starts on this machine: the fallback is not used")
    log = tmp_path / "collector.log"
    with running_collector("--fallback-simulated-gpus", "2", "-c", "200", "--dcgm-names", "pre-4.9", log=log) as url:
        body, _ = scrape(url)
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="1"' in body
    assert "serving 2 SIMULATED GPUs (--fallback-simulated-gpus)" in log.read_text()
