"""Every flag spelling docs/collector.md names is read, with one dash or two as Go reads dcgm-exporter's, and sets
what its long name sets (``-rbmn`` once ended the start with "unknown flag")."""

import re
from dataclasses import fields
from pathlib import Path

import pytest

from collector.settings import FLAGS, Settings, parse_settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "collector.md"
ENV = {"NODE_NAME": "node-a"}

# dcgm-exporter's YAML configuration is read as the flags are parsed: a real one, its counters from a file
CONFIG_FILE = Path(__file__).parent / "counters" / "dcgm-exporter-config-v1.yaml"

# a value unlike the default for each flag that takes one, written as a user writes it
VALUES = {
    "collectors": "/x.csv", "dcgm-names": "pre-4.9", "address": ":9500", "collect-interval": "2000",
    "config-file": str(CONFIG_FILE),
    "configmap-data": "ns:cm",
    "remote-hostengine-info": "h:5555", "slow-fields-interval": "20000", "engine-utilization-interval": "6000",
    "simulate-gpus": "2", "fallback-simulated-gpus": "3", "kubernetes-pod-label-allowlist-regex": "^app",
    "pod-resources-kubelet-socket": "/k.sock", "nvidia-resource-names": "example.com/gpu", "hpc-job-mapping-dir": "/j",
    "web-config-file": "/w.yaml", "xid-count-window-size": "1000", "clock-events-count-window-size": "2000",
    "log-format": "json", "dump-directory": "/d", "dump-retention": "5", "gpu-bind-unbind-poll-interval": "2s",
    "kubernetes-gpu-id-type": "device-name", "kubernetes-virtual-gpus": "true", "devices": "g", "switch-devices": "f",
    "cpu-devices": "f", "enable-dcgm-log": "true", "dcgm-log-level": "DEBUG", "fake-gpus": "true",
    "web-systemd-socket": "true", "disable-startup-validate": "true", "enable-pprof": "true",
}  # fmt: skip


def documented_spellings() -> list[str]:
    """The flags in the first column of docs/collector.md's tables (``-f/--collectors``, ``-rbmn``, ...)."""
    found = []
    for line in DOC.read_text().splitlines():
        if line.startswith("| `-"):
            first = line.split("|")[1]
            for code in re.findall(r"`([^`]+)`", first):
                found += [name.split()[0] for name in code.split("/") if name.startswith("-")]
    return found


def settings_as_dict(settings: Settings) -> dict[str, object]:
    return {f.name: getattr(settings, f.name) for f in fields(settings)}


def test_the_docs_name_every_flag_that_acts() -> None:
    spellings = set(documented_spellings())
    assert {"-rbmn", "-f", "-c", "--collectors", "--enable-pprof"} <= spellings
    missing = [
        f.long for f in FLAGS.flags.values() if not any(n in spellings for n in f.names) and f.long not in {
            "configmap-refresh", "pod-resources-refresh", "pod-resources-timeout", "shared-window", "proc-root",
            "kubeconfig", "hostname-label", "simulate-spec",  # documented in their own sections' prose
        }
    ]  # fmt: skip
    assert missing == []


@pytest.mark.parametrize("spelling", sorted(set(documented_spellings()) - {"-v", "--version"}))  # test_compat_flags
@pytest.mark.parametrize("dashes", ["-", "--"])
def test_each_documented_spelling_sets_what_its_long_name_sets(spelling: str, dashes: str) -> None:
    [flag] = [f for f in FLAGS.flags.values() if spelling in f.names]
    given = dashes + spelling.lstrip("-")
    if flag.switch:  # given alone a switch means true; one whose default is true is set false
        value = "false" if flag.default == "true" else "true"
        by_long = parse_settings([f"--{flag.long}={value}"], env=ENV)
        arguments = [given] if value == "true" else [f"{given}={value}"]
    else:
        value = VALUES[flag.long]
        by_long = parse_settings([f"--{flag.long}", value], env=ENV)
        arguments = [given, value]
    read = parse_settings(arguments, env=ENV)
    assert settings_as_dict(read) == settings_as_dict(by_long)
    if flag.ignored:
        assert read.ignored == (f"--{flag.long}",)
    else:
        assert getattr(read, flag.field or "") != getattr(parse_settings([], env=ENV), flag.field or "")
