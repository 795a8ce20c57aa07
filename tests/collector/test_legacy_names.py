"""dcgm-exporter 1.x: its compatibility counters file (``dcgm_*`` names) and ``-o`` (``uuid``, ``pod_name``, ...)."""

from pathlib import Path

import pytest

from collector.counters import file as counters
from collector.counters.file import Counters
from collector.counters.legacy_names import LEGACY_FIELDS, OLD_NAMESPACE_LABELS
from collector.exposition import Family
from collector.series import Series, gpu_families
from harness.node.collector_process import running_collector
from harness.node.kubelet import PodResourcesServer, gpu_pod
from harness.stores.prometheus import run_prometheus

ONE_X = Path(__file__).parent / "counters" / "dcgm-exporter-1.x.csv"
SIMULATED_UUID_0 = "GPU-217dd245-bed9-55ac-9754-7b4153521051"  # SimulatedNvml(2).uuids()[0]


def test_the_1x_file_reads_each_field_under_its_old_name() -> None:
    parsed = counters.parse(ONE_X.read_text(), "1.x.csv")
    by_name = {c.series: c for c in parsed.counters}
    assert by_name["dcgm_gpu_temp"].field == "DCGM_FI_DEV_GPU_TEMP"
    assert by_name["dcgm_gpu_utilization"].field == "DCGM_FI_DEV_GPU_UTIL"
    assert by_name["dcgm_total_energy_consumption"].type == "counter"
    assert by_name["dcgm_fi_prof_pcie_tx_bytes"].type == "counter"  # the file's type wins, as in dcgm-exporter
    assert by_name["dcgm_fi_prof_pcie_tx_bytes"].help == "PCIe bytes sent."  # the first of its two lines
    assert not any(c.series.startswith("DCGM_") for c in parsed.counters)
    assert any(w.startswith("1.x.csv:54: dcgm_fi_prof_pcie_tx_bytes is listed again") for w in parsed.warnings)


def test_an_old_and_a_new_name_of_one_field_give_one_series_the_first() -> None:
    parsed = counters.parse("dcgm_gpu_temp, gauge, old\nDCGM_FI_DEV_GPU_TEMP, gauge, new\n", "f.csv")
    assert [(c.series, c.help) for c in parsed.counters] == [("dcgm_gpu_temp", "old")]
    assert parsed.warnings == ("f.csv:2: DCGM_FI_DEV_GPU_TEMP is listed again; the first entry is used",)


def test_every_old_name_maps_to_a_distinct_dcgm_field() -> None:
    assert all(name == name.lower() and name.startswith("dcgm_") for name in LEGACY_FIELDS)
    assert all(field.startswith("DCGM_FI_") for field in LEGACY_FIELDS.values())
    assert len(set(LEGACY_FIELDS.values())) == len(LEGACY_FIELDS)


def _families(owner: tuple[tuple[str, str], ...], names: dict[str, str] | None) -> list[Family]:
    parsed = Counters((counters.Counter("DCGM_FI_DEV_GPU_UTIL", "gauge", "u"),), (), (), "test")
    entity = (("gpu", "0"), ("UUID", "GPU-1"), ("device", "nvidia0"))
    return gpu_families([Series(entity, {"DCGM_FI_DEV_GPU_UTIL": 5.0}, owner)], parsed, (("Hostname", "n"),), {},
                        label_names=names)  # fmt: skip


def test_old_namespace_renames_the_gpu_and_pod_labels_only() -> None:
    owner = (("pod", "p"), ("namespace", "ns"), ("container", "c"), ("pod_uid", "u-1"))
    labels = dict(_families(owner, OLD_NAMESPACE_LABELS)[0].samples[0][0])
    assert labels == {"gpu": "0", "uuid": "GPU-1", "device": "nvidia0", "Hostname": "n", "pod_name": "p",
                      "pod_namespace": "ns", "container_name": "c", "pod_uid": "u-1"}  # fmt: skip
    assert dict(_families(owner, None)[0].samples[0][0])["UUID"] == "GPU-1"


def test_a_renamed_label_never_repeats_a_name() -> None:
    # a pod label already called pod_name (from --kubernetes-enable-pod-labels) must not make a second pod_name
    labels = _families((("pod", "p"), ("pod_name", "label value")), OLD_NAMESPACE_LABELS)[0].samples[0][0]
    names = [k for k, _ in labels]
    assert len(names) == len(set(names))
    assert dict(labels)["pod_name"] == "p"


@pytest.mark.prometheus
def test_the_1x_file_and_old_namespace_through_the_command_line_and_a_real_prometheus(tmp_path: Path) -> None:
    kubelet = PodResourcesServer(str(tmp_path / "kubelet.sock")).start()
    kubelet.pods = [gpu_pod("ml", "trainer", SIMULATED_UUID_0, container="main")]
    try:
        socket = str(tmp_path / "kubelet.sock")
        args = ["--simulate-gpus", "2", "-c", "500", "-f", str(ONE_X), "-o", "-k",
                "--pod-resources-kubelet-socket", socket, "--pod-resources-refresh", "200"]  # fmt: skip
        with (
            running_collector(*args) as url,
            run_prometheus(tmp_path / "prom", [url.removeprefix("http://")], scrape_interval="1s") as prom,
        ):
            temps = prom.wait_for("dcgm_gpu_temp", min_results=2)
            assert {r["metric"]["gpu"] for r in temps} == {"0", "1"}
            assert all("uuid" in r["metric"] and "UUID" not in r["metric"] for r in temps)
            assert {r["metric"]["Hostname"] for r in temps} == {"sim-node"}
            owned = prom.wait_for('dcgm_gpu_utilization{pod_name="trainer"}')
            assert owned[0]["metric"]["pod_namespace"] == "ml"
            assert owned[0]["metric"]["container_name"] == "main"
            assert owned[0]["metric"]["uuid"] == SIMULATED_UUID_0
            assert prom.query('{__name__=~"dcgm_.+", pod!=""}') == []
            assert prom.query('{__name__=~"dcgm_.+", UUID!=""}') == []
            assert prom.query('{__name__=~"DCGM_FI_.+"}') == []  # only the names the file gives
            assert prom.query("dcgm_nvlink_bandwidth_total") == []  # a lone H200 has no NVLink: absent, not 0
            meta = prom.api("/api/v1/metadata")
            assert meta["dcgm_total_energy_consumption"][0] == {
                "type": "counter", "help": "[simulated GPU] Energy used since boot (mJ).", "unit": ""
            }  # fmt: skip
            assert meta["dcgm_fi_prof_pcie_tx_bytes"][0]["type"] == "counter"
            assert meta["dcgm_fi_prof_pcie_tx_bytes"][0]["help"] == "[simulated GPU] PCIe bytes sent."
            assert meta["dcgm_gpu_temp"][0]["type"] == "gauge"
            grows = prom.wait_for("rate(dcgm_total_energy_consumption[5s]) > 0", min_results=2)
            assert len(grows) == 2
    finally:
        kubelet.stop()
