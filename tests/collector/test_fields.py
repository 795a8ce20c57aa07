"""The fields dcgm-exporter's files list beyond its defaults: clock-event violations, retired pages, PCIe throughput,
NVLink errors and bandwidth, the DCGM_EXP_* counts and peer status, the vGPU licence, and the label fields."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from collector.nvml.api import EventData, EventSet, Handle
from collector.nvml.event_windows import CLOCK_EVENTS_COUNT, XID_COUNT, EventWindow
from collector.nvml.fields import FIELDS, LABEL_FIELDS, NVLINK_TOTAL, nvlink_field
from collector.nvml.reader import NvmlReader
from collector.simulation.nvml import SimulatedNvml
from harness.node.nvml_trace import ReplayNvml
from harness.processes import free_port
from harness.stores.prometheus import run_prometheus

ROOT = Path(__file__).resolve().parents[2]
ALL = frozenset(FIELDS)
VIOLATIONS = [f"DCGM_FI_DEV_{p}_VIOLATION" for p in ("POWER", "THERMAL", "SYNC_BOOST", "BOARD_LIMIT", "LOW_UTIL")]
RETIRED = {"DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_RETIRED_PENDING"}
NVLINK_ERRORS = {f"DCGM_FI_DEV_NVLINK_{k}_ERROR_COUNT_TOTAL" for k in ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")}


class Clock:
    def __init__(self, now: float = 5000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def simulated(count: int = 1, load: float = 1.0, **kwargs: object) -> tuple[NvmlReader, Clock, list[float]]:
    """A reader over simulated GPUs whose load is ``level[0]`` and whose time moves only when the test moves it."""
    clock, level = Clock(), [load]
    nvml = SimulatedNvml(count, load=lambda i, t: level[0], clock=clock, wall_clock=clock, **kwargs)  # type: ignore[arg-type]
    reader = NvmlReader(nvml, interval=1.0)
    reader.open()
    return reader, clock, level


def test_violations_are_nanoseconds_the_clocks_were_held_down() -> None:
    reader, clock, level = simulated(load=1.0)
    before = reader.read(ALL).readings[0].values
    clock.now += 2.0
    capped = reader.read(ALL).readings[0].values
    assert capped["DCGM_FI_DEV_POWER_VIOLATION"] - before["DCGM_FI_DEV_POWER_VIOLATION"] == 2e9
    assert capped["DCGM_FI_DEV_LOW_UTIL_VIOLATION"] == before["DCGM_FI_DEV_LOW_UTIL_VIOLATION"]
    level[0] = 0.0
    clock.now += 3.0
    idle = reader.read(ALL).readings[0].values
    assert idle["DCGM_FI_DEV_LOW_UTIL_VIOLATION"] - capped["DCGM_FI_DEV_LOW_UTIL_VIOLATION"] == 3e9
    assert idle["DCGM_FI_DEV_POWER_VIOLATION"] == capped["DCGM_FI_DEV_POWER_VIOLATION"]
    assert [idle[name] for name in VIOLATIONS[1:4]] == [0, 0, 0]


def test_retired_pages_are_named_unsupported_on_gpus_that_remap_rows() -> None:
    reader, _, _ = simulated()
    values = reader.read(ALL).readings[0].values
    assert RETIRED.isdisjoint(values)
    assert {reader.unsupported[(0, name)] for name in RETIRED} == {"NotSupported"}
    assert "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS" in values


def test_pcie_throughput_is_kilobytes_a_second_and_the_licence_0_outside_vgpu() -> None:
    reader, _, _ = simulated(load=0.5)
    values = reader.read(ALL).readings[0].values
    assert (values["DCGM_FI_DEV_PCIE_TX_THROUGHPUT"], values["DCGM_FI_DEV_PCIE_RX_THROUGHPUT"]) == (1536, 2560)
    assert values["DCGM_FI_DEV_VGPU_LICENSE_STATUS"] == 0


def test_nvlink_bandwidth_is_dcgms_rate_for_each_active_link_and_all_together() -> None:
    reader, clock, _ = simulated(load=1.0, nvlink=4)
    first = reader.read(ALL).readings[0].values
    assert NVLINK_TOTAL not in first  # the first reading only sets the baseline
    assert (0, NVLINK_TOTAL) not in reader.unsupported
    clock.now += 2.0
    values = reader.read(ALL).readings[0].values
    # the simulated link moves 18e6 KiB a second at full load: DCGM's figure is KiB/s / 1000
    assert [values[nvlink_field(n)] for n in range(4)] == [18000] * 4
    assert values[NVLINK_TOTAL] == 4 * 18000
    assert {values[name] for name in NVLINK_ERRORS} == {0}
    assert reader.unsupported[(0, nvlink_field(4))] == "this NVLink link is not active"
    assert nvlink_field(17) not in values


def test_without_nvlink_its_fields_are_named_once_for_all_gpus(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    reader, _, _ = simulated(count=2)
    for _ in range(3):
        values = reader.read(ALL).readings[1].values
    assert NVLINK_ERRORS.isdisjoint(values)
    lines = [r.getMessage() for r in caplog.records if "no active NVLink link" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith("GPU 0,1: not available (no active NVLink link), left out: ")
    assert NVLINK_TOTAL in lines[0]
    assert nvlink_field(17) in lines[0]


class CountingNvml(SimulatedNvml):
    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.serial_calls = 0

    def nvmlDeviceGetSerial(self, handle: Handle) -> str:
        self.serial_calls += 1
        return super().nvmlDeviceGetSerial(handle)


def test_label_fields_name_each_gpu_as_asked_and_are_read_once() -> None:
    nvml = CountingNvml(2)
    reader = NvmlReader(nvml)
    reader.open()
    asked = ("DCGM_FI_DEV_VBIOS_VERSION", "DCGM_FI_DEV_POWER_INFOROM_VER", "DCGM_FI_DEV_SERIAL")
    for _ in range(3):
        result = reader.read(frozenset({"DCGM_FI_DEV_GPU_TEMP"}), (*asked, "DCGM_FI_NVML_VERSION"))
    assert result.readings[1].gpu.labels == (
        ("DCGM_FI_DEV_VBIOS_VERSION", "96.00.B5.00.02"),
        ("DCGM_FI_DEV_SERIAL", "1654124000001"),
    )
    assert nvml.serial_calls == 2  # once per GPU: they do not change while the driver is loaded
    assert reader.unsupported[(1, "DCGM_FI_DEV_POWER_INFOROM_VER")] == "NotSupported"
    assert reader.system_labels == {"DCGM_FI_DRIVER_VERSION": "580.159.04", "DCGM_FI_NVML_VERSION": "13.580.159.04"}
    # a label no longer asked leaves the GPU's name
    assert reader.read(frozenset({"DCGM_FI_DEV_GPU_TEMP"})).readings[0].gpu.labels == ()


def test_an_event_window_counts_by_code_and_forgets_what_is_older() -> None:
    clock = Clock(100.0)
    window = EventWindow(10.0, clock)
    assert window.samples("xid") == (((("window_size_in_ms", "10000"),), 0.0),)
    window.add([79, 13])
    clock.now += 6
    window.add([79])
    assert window.samples("xid") == (
        ((("window_size_in_ms", "10000"), ("xid", "13")), 1.0),
        ((("window_size_in_ms", "10000"), ("xid", "79")), 2.0),
    )
    clock.now += 5  # the first two are now 11 s old
    assert window.counts() == {79: 1}
    clock.now += 5
    assert window.counts() == {}


def test_clock_events_are_counted_once_a_cycle_for_each_reason() -> None:
    reader, _, level = simulated(load=1.0)
    for _ in range(3):
        result = reader.read(frozenset({CLOCK_EVENTS_COUNT}))
    assert result.readings[0].labelled[CLOCK_EVENTS_COUNT] == (
        ((("window_size_in_ms", "300000"), ("clock_event", "power_cap")), 3.0),
    )
    assert result.readings[0].values == {}  # served only as labelled samples
    level[0] = 0.0
    samples = reader.read(frozenset({CLOCK_EVENTS_COUNT})).readings[0].labelled[CLOCK_EVENTS_COUNT]
    assert [(dict(labels)["clock_event"], n) for labels, n in samples] == [("gpu_idle", 1.0), ("power_cap", 3.0)]


class XidsOnGpu1(SimulatedNvml):
    """GPU 1 reports XIDs 79, 79 and 13; NVML's wait then times out as it does when nothing happened."""

    def __init__(self) -> None:
        super().__init__(2)
        self.pending = [13, 79, 79]

    def nvmlDeviceRegisterEvents(self, handle: Handle, types: int, event_set: EventSet) -> None:
        event_set.gpu = getattr(handle, "index", None)  # type: ignore[attr-defined]

    def nvmlEventSetWait(self, event_set: EventSet, timeout_ms: int) -> EventData:
        if getattr(event_set, "gpu", None) == 1 and self.pending:
            return SimpleNamespace(eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=self.pending.pop())
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)


def test_xid_errors_are_counted_by_xid_while_the_last_xid_stays_served() -> None:
    reader = NvmlReader(XidsOnGpu1(), xid_window=60.0)
    reader.open()
    both = frozenset({XID_COUNT, "DCGM_FI_DEV_XID_ERRORS"})
    for _ in range(2):
        gpu0, gpu1 = reader.read(both).readings
        assert gpu1.labelled[XID_COUNT] == (
            ((("window_size_in_ms", "60000"), ("xid", "13")), 1.0),
            ((("window_size_in_ms", "60000"), ("xid", "79")), 2.0),
        )
        assert gpu1.values["DCGM_FI_DEV_XID_ERRORS"] == 13
        assert gpu0.labelled[XID_COUNT] == (((("window_size_in_ms", "60000"),), 0.0),)


@pytest.mark.parametrize(("links", "status"), [(18, ("OK", 0.0)), (0, ("NotSupported", 5.0))])
def test_p2p_status_names_each_peer(links: int, status: tuple[str, float]) -> None:
    reader, _, _ = simulated(count=3, nvlink=links)
    samples = reader.read(frozenset({"DCGM_EXP_P2P_STATUS"})).readings[2].labelled["DCGM_EXP_P2P_STATUS"]
    assert [(dict(labels)["peer_gpu"], dict(labels)["link_status"], n) for labels, n in samples] == [
        ("0", *status),
        ("1", *status),
    ]
    lone, _, _ = simulated(count=1, nvlink=links)
    assert lone.read(frozenset({"DCGM_EXP_P2P_STATUS"})).readings[0].labelled["DCGM_EXP_P2P_STATUS"] == ()


def test_on_the_recorded_h200_field_values_are_answered_field_by_field(h200: ReplayNvml) -> None:
    """The recording asked memory temperature with the NVLink counters; the reader now asks it alone."""
    reader = NvmlReader(h200)
    reader.open()
    values = reader.read(frozenset({"DCGM_FI_DEV_MEMORY_TEMP"})).readings[0].values
    recorded = h200.recorded("nvmlDeviceGetFieldValues", "gpu0", [82, 138, 139])
    assert values["DCGM_FI_DEV_MEMORY_TEMP"] == recorded[0].value.uiVal


def test_a_call_the_gpu_does_not_support_costs_its_fields_and_no_error(h200: ReplayNvml) -> None:
    h200.fail("nvmlDeviceGetPcieThroughput", pynvml.NVML_ERROR_NOT_SUPPORTED)
    h200.fail("nvmlDeviceGetSerial", pynvml.NVML_ERROR_NOT_SUPPORTED)
    reader = NvmlReader(h200)
    reader.open()
    pcie = frozenset({"DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "DCGM_FI_DEV_GPU_TEMP"})
    for _ in range(2):
        result = reader.read(pcie, ("DCGM_FI_DEV_SERIAL",))
    assert set(result.readings[0].values) == {"DCGM_FI_DEV_GPU_TEMP"}
    assert result.readings[0].gpu.labels == ()
    assert reader.unsupported[(0, "DCGM_FI_DEV_SERIAL")] == "NotSupported"
    assert not result.errors
    assert h200.calls.count("nvmlDeviceGetPcieThroughput") == 1


def counters_file(path: Path) -> Path:
    lines = [f"{name}, {field.type}, {name} help" for name, field in FIELDS.items()]
    lines += [f"{name}, label, {name}" for name in sorted(LABEL_FIELDS)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.prometheus
def test_every_field_through_the_command_line_and_a_real_prometheus(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "collector.log"
    args = ["-f", str(counters_file(tmp_path / "all.csv")), "--simulate-gpus", "2", "-c", "500", "-x", "120000"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "collector", "-a", f"127.0.0.1:{port}", *args],
            cwd=ROOT, env={**os.environ, "NODE_NAME": "node-a"}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                    if b"gpuscale_collector_collections_total" in resp.read():
                        break
            except OSError:
                pass
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        with run_prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"]) as prom:
            temp = prom.wait_for('DCGM_FI_DEV_GPU_TEMP{gpu="1"}')[0]["metric"]
            assert temp["DCGM_FI_DEV_SERIAL"] == "1654124000001"
            assert (temp["DCGM_FI_DEV_BRAND"], temp["DCGM_FI_NVML_VERSION"]) == ("NVIDIA", "13.580.159.04")
            assert "DCGM_FI_DEV_POWER_INFOROM_VER" not in temp
            assert prom.wait_for("DCGM_FI_DEV_POWER_VIOLATION", min_results=2)
            xid = prom.wait_for("DCGM_EXP_XID_ERRORS_COUNT", min_results=2)
            assert {(r["metric"]["window_size_in_ms"], r["value"][1]) for r in xid} == {("120000", "0")}
            p2p = prom.wait_for('DCGM_EXP_P2P_STATUS{gpu="0"}')
            assert (p2p[0]["metric"]["peer_gpu"], p2p[0]["metric"]["link_status"]) == ("1", "NotSupported")
            prom.wait_for('DCGM_EXP_CLOCK_EVENTS_COUNT{clock_event!=""}')
            metadata = prom.api("/api/v1/metadata", metric="DCGM_FI_DEV_THERMAL_VIOLATION")
            assert metadata["DCGM_FI_DEV_THERMAL_VIOLATION"][0]["type"] == "counter"
            assert not prom.query('{__name__=~"DCGM_FI_DEV_RETIRED_.*|DCGM_FI_DEV_NVLINK_.*"}')
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    text = log.read_text()
    # what the simulated H200 lacks is named once, with the reason, for both GPUs
    assert text.count("DCGM_FI_DEV_RETIRED_SBE") == 1
    assert "GPU 0,1: not available (NotSupported), left out: " in text
