"""``--dump-enabled``: dcgm-exporter's debug dumps (what a scrape was served, and the GPUs read) as JSON files."""

import gzip
import json
import os
import re
import time
from pathlib import Path

import pytest

from collector.debug_dump import Dumper
from collector.exposition import Family
from collector.nvml.device import GpuInfo
from harness.node.collector_process import running_collector, scrape

GPU = GpuInfo(index=0, uuid="GPU-1", pci_bus_id="00000000:19:00.0", minor=0, model="NVIDIA H200")
FAMILIES = (Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "u", (((("gpu", "0"), ("UUID", "GPU-1")), 42.0),)),)
NAME = re.compile(r"(metrics|deviceinfo)-GPU-\d{8}-\d{6}-[0-9a-f]{8}\.json\.gz")


def dumper(directory: Path, retention: int = 24, compress: bool = True) -> Dumper:
    return Dumper(directory, retention, compress, devices=lambda: ("580.159.04", [GPU]))


def test_one_collection_is_dumped_once_as_two_gzipped_files(tmp_path: Path) -> None:
    d = dumper(tmp_path / "dumps")
    written = d.dump(FAMILIES, taken_at=100.0)
    assert sorted(p.name.split("-")[0] for p in written) == ["deviceinfo", "metrics"]
    assert all(NAME.fullmatch(p.name) for p in written)
    documents = {p.name.split("-")[0]: json.loads(gzip.decompress(p.read_bytes())) for p in written}
    assert documents["metrics"]["families"][0] == {
        "name": "DCGM_FI_DEV_GPU_UTIL", "type": "gauge", "help": "u",
        "samples": [{"labels": {"gpu": "0", "UUID": "GPU-1"}, "value": 42.0}],
    }  # fmt: skip
    assert documents["deviceinfo"]["driver_version"] == "580.159.04"
    [gpu] = documents["deviceinfo"]["gpus"]
    assert {k: gpu[k] for k in ("index", "uuid", "pci_bus_id", "minor", "model")} == {
        "index": 0, "uuid": "GPU-1", "pci_bus_id": "00000000:19:00.0", "minor": 0, "model": "NVIDIA H200"
    }  # fmt: skip
    assert d.dump(FAMILIES, taken_at=100.0) == []  # the same collection again: nothing new to say
    assert len(d.dump(FAMILIES, taken_at=101.0)) == 2


def test_plain_json_without_compression(tmp_path: Path) -> None:
    written = dumper(tmp_path, compress=False).dump(FAMILIES, taken_at=1.0)
    assert all(p.suffix == ".json" for p in written)
    assert json.loads(written[0].read_text())


def test_files_past_the_retention_are_removed_and_only_dump_files(tmp_path: Path) -> None:
    d = dumper(tmp_path, retention=1)
    old = d.dump(FAMILIES, taken_at=1.0)
    new = d.dump(FAMILIES, taken_at=2.0)
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a dump")
    two_hours_ago = time.time() - 7200
    for path in (*old, foreign):
        os.utime(path, (two_hours_ago, two_hours_ago))
    assert d.clean() == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*(p.name for p in new), "notes.txt"])
    assert dumper(tmp_path, retention=0).clean() == 0  # 0 keeps every file


def test_an_unwritable_directory_is_said_once_and_costs_nothing_else(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    d = dumper(blocker / "dumps")  # a directory cannot be made under a file
    assert d.dump(FAMILIES, taken_at=1.0) == []
    assert d.dump(FAMILIES, taken_at=2.0) == []
    assert caplog.text.count("debug dump not written to") == 1


def test_the_command_line_writes_a_dump_of_what_a_scrape_was_served(tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    env = {"DCGM_EXPORTER_DUMP_ENABLED": "true", "DCGM_EXPORTER_DUMP_COMPRESSION": "false"}
    with running_collector(
        "--simulate-gpus",
        "1",
        "-c",
        "60000",
        "--dcgm-names",
        "pre-4.9",
        "--dump-directory",
        str(dumps),
        env=env,
        collections=1,
    ) as url:
        body, _ = scrape(url)
        deadline = time.monotonic() + 10
        while len(list(dumps.glob("*.json"))) < 2:
            assert time.monotonic() < deadline, "no dump was written"
            time.sleep(0.1)
        scrape(url)  # the same collection again (one a minute): no new files
        time.sleep(0.5)
        files = sorted(dumps.glob("*.json"))
    assert [p.name.split("-")[0] for p in files] == ["deviceinfo", "metrics"]
    metrics = json.loads(next(p for p in files if p.name.startswith("metrics")).read_text())
    util = next(f for f in metrics["families"] if f["name"] == "DCGM_FI_DEV_GPU_UTIL")
    served = re.search(r'DCGM_FI_DEV_GPU_UTIL\{gpu="0"[^}]*\} (\S+)', body)
    assert served is not None
    assert util["samples"][0]["value"] == float(served.group(1))
    devices = json.loads(next(p for p in files if p.name.startswith("deviceinfo")).read_text())
    assert [g["model"] for g in devices["gpus"]] == ["NVIDIA H200"]


def test_the_command_line_removes_dumps_older_than_dump_retention_at_start(tmp_path: Path) -> None:
    """``--dump-retention 1``: a dump two hours old goes at start and one of this hour stays; the default (24 h)
    would keep both."""
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    kept = dumper(dumps).dump(FAMILIES, taken_at=1.0)
    old = dumper(dumps).dump(FAMILIES, taken_at=2.0)
    two_hours_ago = time.time() - 7200
    for path in old:
        os.utime(path, (two_hours_ago, two_hours_ago))
    args = ("--simulate-gpus", "1", "-c", "60000", "--dump-enabled", "--dump-directory", str(dumps))
    with running_collector(*args, "--dump-retention", "1", collections=1):
        deadline = time.monotonic() + 10
        while any(p.exists() for p in old):
            assert time.monotonic() < deadline, f"{old} not removed"
            time.sleep(0.1)
    assert all(p.exists() for p in kept)
