"""dcgm-exporter's own contract tests, replayed against the collector's /metrics with simulated GPUs.

Facts taken from NVIDIA/dcgm-exporter at commit 7ad5832 (``tests/internal/metriccontract/metrics.go`` and
``tests/internal/exportercontract/contracts.go``): the baseline families and their types, the GPU identity labels,
non-negative values, ``Hostname`` or ``hostname``, pod attribution, MIG labels on some series, and ``customMetrics``
replacing the default families. That commit predates dcgm-exporter 4.9, so its baseline is in the pre-4.9 names:
the collector is run with ``--dcgm-names pre-4.9`` for it, and the same contract is checked in the 4.10 names (the
collector's default) through the renames dcgm-exporter 4.9.0 and 4.10.0 list.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.simulation.nvml import SimulatedNvml
from harness.kube.threaded import ThreadedApiServer
from harness.node.collector_process import running_collector
from harness.node.kubelet import PodResourcesServer, gpu_pod

ROOT = Path(__file__).resolve().parents[2]
GPU_IDENTITY = ("gpu", "UUID", "device", "modelName")
HOSTNAME = ("Hostname", "hostname")

# metriccontract.BaselineGPUFamilies: name → Prometheus type, in dcgm-exporter 4.8's names
BASELINE = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "gauge",
}
# the same families under dcgm-exporter 4.9/4.10's names (its release notes), the collector's default
BASELINE_4_10 = {
    "DCGM_FI_DEV_SM_CLOCK_HERTZ": "gauge",
    "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS": "gauge",
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS": "gauge",
    "DCGM_FI_DEV_BOARD_POWER_WATTS": "gauge",
    "DCGM_FI_DEV_BOARD_ENERGY_JOULES_TOTAL": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_TOTAL": "counter",
    "DCGM_FI_DEV_GPU_UTIL_RATIO": "gauge",
    "DCGM_FI_DEV_MEMORY_COPY_UTIL_RATIO": "gauge",
    "DCGM_FI_DEV_ENC_UTIL_RATIO": "gauge",
    "DCGM_FI_DEV_DEC_UTIL_RATIO": "gauge",
    "DCGM_FI_DEV_FB_FREE_BYTES": "gauge",
    "DCGM_FI_DEV_FB_USED_BYTES": "gauge",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "gauge",
}


@dataclass(frozen=True)
class Family:
    type: str
    samples: tuple[tuple[dict[str, str], float], ...]


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def families(url: str) -> dict[str, Family]:
    """The page's families as Go's expfmt reads the text format, which dcgm-exporter's contract parses with: name →
    ``# TYPE`` and samples under the name the page gives (prometheus_client's parser would add ``_total`` to a
    counter's, which the format does not ask for and dcgm-exporter does not serve)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    types: dict[str, str] = {}
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, type_ = line.split(" ", 3)
            types[name] = type_
        elif line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match, line
            labels = {k: v.encode().decode("unicode_escape") for k, v in _LABEL.findall(match.group(2) or "")}
            samples.setdefault(match.group(1), []).append((labels, float(match.group(3))))
    return {name: Family(types.get(name, "untyped"), tuple(s)) for name, s in samples.items()}


def contract_errors(found: dict[str, Family], wanted: dict[str, str]) -> list[str]:
    """metriccontract.ValidateContracts: present, of the type, a sample with every GPU identity label non-empty,
    no negative value."""
    errors = []
    for name, type_ in wanted.items():
        family = found.get(name)
        if family is None or not family.samples:
            errors.append(f"{name} is missing")
            continue
        if family.type != type_:
            errors.append(f"{name} has type {family.type}, expected {type_}")
        if not any(all(labels.get(k) for k in GPU_IDENTITY) for labels, _ in family.samples):
            errors.append(f"{name} has no sample with {GPU_IDENTITY}")
        if any(value < 0 for _, value in family.samples):
            errors.append(f"{name} has a negative sample")
    return errors


def csv_rows(path: Path) -> list[tuple[str, str]]:
    """metriccontract.ReadDefaultCounterRows: the enabled rows of a counters file, name and type."""
    rows = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, type_, *_ = (part.strip() for part in line.split(","))
            rows.append((name, type_))
    return rows


@pytest.mark.parametrize(
    ("names", "baseline", "counters"),
    [
        ("pre-4.9", BASELINE, "default-counters-pre-4.9.csv"),
        ("4.10", BASELINE_4_10, "default-counters.csv"),
    ],
)
def test_the_baseline_families_and_every_default_row(names: str, baseline: dict[str, str], counters: str) -> None:
    """exportercontract.BaselineMetrics (tests/internal/exportercontract/contracts.go) with the families of
    metriccontract.BaselineGPUFamilies and ValidateDefaultCounterRows (tests/internal/metriccontract/metrics.go): each
    baseline family and each enabled row of the shipped counters file is served with its type, the GPU identity
    labels and no negative value; a label row is a label of some DCGM_FI_ series; a host label is on the baseline."""
    with running_collector("--simulate-gpus", "2", "-c", "500", "--dcgm-names", names) as url:
        found = families(url)
    assert contract_errors(found, baseline) == []
    rows = csv_rows(ROOT / "collector" / "counters" / counters)
    metric_rows = {name: type_ for name, type_ in rows if type_ != "label"}
    # NVLink series are absent on a GPU without an active link, as dcgm-exporter skips an unsupported field
    unsupported = {name for name in metric_rows if "NVLINK" in name}
    assert contract_errors(found, {k: v for k, v in metric_rows.items() if k not in unsupported}) == []
    for name, _ in (row for row in rows if row[1] == "label"):
        assert any(labels.get(name) for n, f in found.items() if n.startswith("DCGM_FI_") for labels, _ in f.samples), (
            name
        )
    for name in baseline:
        assert any(any(labels.get(h) for h in HOSTNAME) for labels, _ in found[name].samples), name
    # ValidateAtLeastOneDCGMGPUFamily
    assert any(n.startswith("DCGM_FI_") and any("gpu" in s[0] and "UUID" in s[0] for s in f.samples)
               for n, f in found.items())  # fmt: skip


def test_the_4_10_names_carry_the_units_their_names_say() -> None:
    """The renamed families are the same readings in the unit the new name carries (dcgm-exporter 4.9.0's notes:
    utilization a 0-1 ratio, clocks Hz, memory bytes, energy J). Not in dcgm-exporter's contract tests, which
    predate 4.9: a collector serving both spellings at once is compared here."""
    both = ROOT / "tests" / "collector" / "counters" / "dcgm-4.10-and-4.8.csv"
    with running_collector("--simulate-gpus", "1", "-c", "500", "-f", str(both)) as url:
        found = families(url)

    def value(name: str) -> float:
        return found[name].samples[0][1]

    assert 0 <= value("DCGM_FI_DEV_GPU_UTIL_RATIO") <= 1
    # both names are read in one collection, so the same reading scaled
    assert value("DCGM_FI_DEV_GPU_UTIL_RATIO") == pytest.approx(value("DCGM_FI_DEV_GPU_UTIL") / 100)
    assert value("DCGM_FI_DEV_SM_CLOCK_HERTZ") == value("DCGM_FI_DEV_SM_CLOCK") * 1e6
    assert value("DCGM_FI_DEV_FB_USED_BYTES") == value("DCGM_FI_DEV_FB_USED") * 1024 * 1024
    assert value("DCGM_FI_DEV_FB_CAPACITY_BYTES") == value("DCGM_FI_DEV_FB_TOTAL") * 1024 * 1024
    assert value("DCGM_FI_DEV_BOARD_ENERGY_JOULES_TOTAL") == pytest.approx(
        value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") / 1000
    )
    assert found["DCGM_FI_DEV_BOARD_ENERGY_JOULES_TOTAL"].type == "counter"
    labels = found["DCGM_FI_DEV_GPU_UTIL_RATIO"].samples[0][0]
    assert labels["DCGM_FI_SYSTEM_DRIVER_VERSION"] == SimulatedNvml(1).nvmlSystemGetDriverVersion()


def test_without_a_host_label_no_series_has_one() -> None:
    """exportercontract.NoHostnameMetrics (tests/internal/exportercontract/contracts.go): with -n the baseline
    holds and no series carries Hostname or hostname."""
    with running_collector("--simulate-gpus", "1", "-c", "500", "-n", "--dcgm-names", "pre-4.9") as url:
        found = families(url)
    assert contract_errors(found, BASELINE) == []
    assert not [n for n, f in found.items() for labels, _ in f.samples if any(labels.get(h) for h in HOSTNAME)]


@pytest.mark.parametrize("spelling", HOSTNAME)
def test_either_host_label_spelling_satisfies_the_contract(spelling: str) -> None:
    """metriccontract.GPUHostnameLabels (tests/internal/metriccontract/metrics.go) accepts Hostname (up to 4.8.2)
    and hostname (4.8.3 on): --hostname-label serves either, one per series."""
    with running_collector("--simulate-gpus", "1", "-c", "500", "--hostname-label", spelling) as url:
        found = families(url)
    other = next(h for h in HOSTNAME if h != spelling)
    samples = found["DCGM_FI_DEV_GPU_UTIL_RATIO"].samples
    assert all(labels.get(spelling) == "sim-node" and other not in labels for labels, _ in samples)


def test_mig_instances_carry_their_labels(tmp_path: Path) -> None:
    """metriccontract.ValidateCapabilityContracts' MIG case (tests/internal/metriccontract/metrics.go): some DCGM_FI_
    series carries GPU_I_ID and GPU_I_PROFILE, and the profiling families keep gpu and UUID and no negative value."""
    spec = tmp_path / "mig.yaml"
    spec.write_text("gpus: 2\nmig: {1: [1g.18gb, 3g.71gb]}\n")
    with running_collector("--simulate-spec", str(spec), "-c", "500") as url:
        found = families(url)
    mig = [labels for n, f in found.items() if n.startswith("DCGM_FI_") for labels, _ in f.samples
           if labels.get("GPU_I_ID") and labels.get("GPU_I_PROFILE")]  # fmt: skip
    assert {(m["gpu"], m["GPU_I_PROFILE"]) for m in mig} >= {("1", "1g.18gb"), ("1", "3g.71gb")}
    profiling = {n: f for n, f in found.items() if n.startswith("DCGM_FI_PROF_")}
    assert profiling
    for name, family in profiling.items():
        assert any(labels.get("gpu") and labels.get("UUID") for labels, _ in family.samples), name
        assert all(value >= 0 for _, value in family.samples), name


@pytest.fixture
def node(tmp_path: Path) -> Iterator[list[str]]:
    """A pod ``ml/trainer`` holding GPU 0 through the device plugin: the kubelet's pod-resources over real gRPC
    and the Kubernetes API stand-in for the pod's metadata."""
    api = ThreadedApiServer().start()
    kubelet = PodResourcesServer(str(tmp_path / "kubelet.sock")).start()
    try:
        api.put("pods", "trainer", namespace="ml", uid="uid-trainer", spec={"nodeName": "sim-node"})
        kubelet.pods = [gpu_pod("ml", "trainer", SimulatedNvml(2).uuids()[0], container="main")]
        kubeconfig = api.server.kubeconfig(tmp_path / "kubeconfig")
        yield ["-k", "--kubeconfig", str(kubeconfig), "--pod-resources-kubelet-socket", kubelet.socket_path,
               "--simulate-gpus", "2", "-c", "500"]  # fmt: skip
    finally:
        kubelet.stop()
        api.close()


def test_pod_attribution_on_the_baseline_families(node: list[str]) -> None:
    """exportercontract.BaselineMetrics with RequireKubernetesLabels (tests/internal/exportercontract/contracts.go):
    every baseline family has a sample naming the pod, namespace and container that hold the GPU."""
    with running_collector(*node, "--dcgm-names", "pre-4.9") as url:
        found = families(url)
    owner = {"pod": "trainer", "namespace": "ml", "container": "main"}
    for name in BASELINE:
        assert any(owner.items() <= labels.items() and labels["gpu"] == "0" for labels, _ in found[name].samples), name


def test_custom_metrics_replace_the_defaults(tmp_path: Path, node: list[str]) -> None:
    """exportercontract.CustomMetrics (tests/internal/exportercontract/contracts.go): a counters file of
    DCGM_FI_DEV_GPU_TEMP, DCGM_FI_DEV_FB_USED and the DCGM_FI_DRIVER_VERSION label serves exactly those two DCGM
    families, with the identity, host, pod and driver-version labels."""
    custom = tmp_path / "custom.csv"
    custom.write_text(
        "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
        "DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n"
        "DCGM_FI_DRIVER_VERSION, label, Driver version.\n"
    )
    with running_collector(*node, "-f", str(custom)) as url:
        found = families(url)
    wanted = {"DCGM_FI_DEV_GPU_TEMP": "gauge", "DCGM_FI_DEV_FB_USED": "gauge"}
    assert contract_errors(found, wanted) == []
    assert {n for n in found if n.startswith("DCGM_FI_")} == set(wanted)
    for name in wanted:
        samples = [labels for labels, _ in found[name].samples]
        assert any(labels.get("pod") == "trainer" and labels.get("namespace") == "ml" for labels in samples)
        assert all(labels.get("DCGM_FI_DRIVER_VERSION") and labels.get("Hostname") for labels in samples)
