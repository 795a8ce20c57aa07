"""dcgm-exporter's label options through the real command line, scraped by a real Prometheus: pod labels and UIDs
(-k with the Kubernetes API stand-in and the kubelet's pod-resources over real gRPC), GPUs of DRA claims, MIG
instances without -k, HPC job files and XID labels."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector.pods.labels import RESERVED
from collector.simulation.nvml import SimulatedNvml
from harness.kube.threaded import ThreadedApiServer
from harness.node.kubelet import DraClaim, FakePod, PodResourcesServer, gpu_pod
from harness.processes import free_port
from harness.stores.prometheus import run_prometheus

ROOT = Path(__file__).resolve().parents[2]
NODE = "node-a"
UUIDS = SimulatedNvml(2).uuids()
POD_UID = ("--kubernetes-enable-pod-uid",)
LABEL_OPTIONS = (*POD_UID, "--kubernetes-enable-pod-labels", "--kubernetes-pod-label-allowlist-regex",
                 r"^app\.kubernetes\.io/,team")  # fmt: skip


@dataclass
class Collector:
    url: str
    log: Path

    def metrics(self) -> dict[str, list[dict[str, str]]]:
        """Series name → the label sets of its samples, as prometheus_client's parser reads the page."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, list[dict[str, str]]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.setdefault(s.name, []).append(dict(s.labels))
        return out


@contextmanager
def started(tmp_path: Path, *args: str) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """The collector's process with ``args``, its URL and its log; stopped on leaving."""
    port = free_port()
    log = tmp_path / "collector.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            # dcgm-exporter 4.8's names, which these tests read
            [sys.executable, "-m", "collector", "-a", f"127.0.0.1:{port}", "--dcgm-names", "pre-4.9", *args],
            cwd=ROOT, env={**os.environ, "NODE_NAME": NODE}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}", proc, log
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def collector(tmp_path: Path, *args: str) -> Iterator[Collector]:
    """The collector at a 500 ms interval, once it has published two collections."""
    with started(tmp_path, "-c", "500", *args) as (url, proc, log):
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/metrics", timeout=2) as resp:
                    if b"gpuscale_collector_collections_total 2" in resp.read():
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"collector did not come up: {log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield Collector(url, log)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ThreadedApiServer, PodResourcesServer, list[str]]]:
    """Two pods on this node: one holds GPU 0 through the device plugin, one GPU 1 through a DRA claim."""
    api = ThreadedApiServer().start()
    kubelet = PodResourcesServer(str(tmp_path / "kubelet.sock")).start()
    try:
        labels = {"app.kubernetes.io/name": "trainer", "team": "ml", "secret-token": "s3cr3t"}
        api.put("pods", "trainer", labels=labels, namespace="ml", uid="uid-trainer", spec={"nodeName": NODE})
        api.put("pods", "dra-job", labels={"app.kubernetes.io/name": "dra-job"}, namespace="ml", uid="uid-dra",
                spec={"nodeName": NODE})  # fmt: skip
        api.put("pods", "elsewhere", labels={"team": "x"}, namespace="ml", uid="uid-x", spec={"nodeName": "node-b"})
        device = {"name": "gpu-1", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": UUIDS[1]}}}
        api.put("resourceslices.resource.k8s.io", f"{NODE}-gpu.nvidia.com", spec={
            "nodeName": NODE, "driver": "gpu.nvidia.com", "pool": {"name": NODE}, "devices": [device],
        })  # fmt: skip
        kubelet.pods = [
            gpu_pod("ml", "trainer", UUIDS[0]),
            FakePod("ml", "dra-job", claims={"main": [DraClaim("gpu", "ml", [("gpu.nvidia.com", NODE, "gpu-1")])]}),
        ]
        kubeconfig = api.server.kubeconfig(tmp_path / "kubeconfig")
        yield api, kubelet, ["-k", "--kubeconfig", str(kubeconfig), "--pod-resources-kubelet-socket",
                             kubelet.socket_path, "--simulate-gpus", "2"]  # fmt: skip
    finally:
        kubelet.stop()
        api.close()


@pytest.mark.prometheus
def test_pod_labels_uids_and_dra_gpus_reach_prometheus(
    tmp_path: Path, cluster: tuple[ThreadedApiServer, PodResourcesServer, list[str]]
) -> None:
    api, _, args = cluster
    with (
        collector(tmp_path, *args, *LABEL_OPTIONS, "--kubernetes-enable-dra") as c,
        run_prometheus(tmp_path / "prometheus", [c.url.removeprefix("http://")]) as prom,
    ):
        trainer = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="trainer",app_kubernetes_io_name="trainer"}')[0]["metric"]
        assert (trainer["gpu"], trainer["namespace"], trainer["container"]) == ("0", "ml", "main")
        assert (trainer["team"], trainer["pod_uid"]) == ("ml", "uid-trainer")
        assert "secret_token" not in trainer  # not in the allowlist
        dra = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="dra-job",pod_uid="uid-dra"}')[0]["metric"]
        assert (dra["gpu"], dra["UUID"], dra["app_kubernetes_io_name"]) == ("1", UUIDS[1], "dra-job")
        claim = {k: v for k, v in dra.items() if k.startswith("dra_")}
        assert claim == {"dra_claim_name": "gpu", "dra_claim_namespace": "ml", "dra_driver_name": "gpu.nvidia.com",
                         "dra_pool_name": NODE, "dra_device_name": "gpu-1"}  # fmt: skip
        # the pod is relabelled: the watch brings it, and the next collection serves it
        api.put("pods", "trainer", labels={"app.kubernetes.io/name": "trainer", "team": "vision"}, namespace="ml",
                uid="uid-trainer", spec={"nodeName": NODE})  # fmt: skip
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="trainer",team="vision"}')
        assert not prom.query('DCGM_FI_DEV_GPU_UTIL{pod="trainer",team="ml"}')  # the old series went stale
        # every series of the GPU carries them, not only utilization
        assert prom.query('DCGM_FI_DEV_FB_USED{pod="dra-job",dra_claim_name="gpu"}')


@pytest.mark.prometheus
def test_pod_labels_named_as_the_collectors_own_keep_the_scrape_valid(
    tmp_path: Path, cluster: tuple[ThreadedApiServer, PodResourcesServer, list[str]]
) -> None:
    """A pod labelled ``pod``, ``namespace``, ``pod_uid``, ``dra_claim_name``... would repeat a label name in its
    series, and Prometheus would refuse the node's whole scrape: each is served as ``label_<name>``."""
    api, _, args = cluster
    hostile = {name: f"x-{name}" for name in (*RESERVED, "dra_claim_name", "DCGM_FI_DRIVER_VERSION")}
    api.put("pods", "trainer", labels=hostile, namespace="ml", uid="uid-trainer", spec={"nodeName": NODE})
    with (
        collector(tmp_path, *args, *POD_UID, "--kubernetes-enable-pod-labels", "--kubernetes-enable-dra") as c,
        run_prometheus(tmp_path / "prometheus", [c.url.removeprefix("http://")]) as prom,
    ):
        trainer = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="trainer",label_pod="x-pod"}')[0]["metric"]
        assert (trainer["pod"], trainer["namespace"], trainer["container"]) == ("trainer", "ml", "main")
        assert (trainer["pod_uid"], trainer["gpu"], trainer["Hostname"]) == ("uid-trainer", "0", NODE)
        assert {k: v for k, v in trainer.items() if k.startswith("label_")} == {
            f"label_{name}": value for name, value in hostile.items()
        }
        assert [s["value"][1] for s in prom.query("up")] == ["1"]
        # the DRA pod's series keep its claim's labels, whatever the other pod is labelled
        assert prom.query('DCGM_FI_DEV_GPU_UTIL{pod="dra-job",dra_claim_name="gpu"}')


def test_the_first_collection_already_names_every_pod(
    tmp_path: Path, cluster: tuple[ThreadedApiServer, PodResourcesServer, list[str]]
) -> None:
    """The collection thread starts before the event loop that asks the kubelet, the API server's pods and the
    ResourceSlices: its first cycle waits for their answers, so the first scrape carries every pod label and DRA
    claim (before, the first scrape named no pod)."""
    _, _, args = cluster
    with started(tmp_path, *args, *LABEL_OPTIONS, "--kubernetes-enable-dra") as (url, proc, log):
        deadline = time.monotonic() + 30
        first = ""
        while "\ngpuscale_collector_collections_total 1\n" not in first:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            try:  # each poll well within the 1 s between the first cycle and the second
                with urllib.request.urlopen(f"{url}/metrics", timeout=2) as resp:
                    first = resp.read().decode()
            except OSError:
                time.sleep(0.01)
    util = {
        s.labels["gpu"]: s.labels
        for family in text_string_to_metric_families(first)
        for s in family.samples
        if s.name == "DCGM_FI_DEV_GPU_UTIL"
    }
    assert (util["0"].get("pod"), util["0"].get("pod_uid"), util["0"].get("team")) == ("trainer", "uid-trainer", "ml")
    assert (util["1"].get("pod"), util["1"].get("dra_claim_name")) == ("dra-job", "gpu")
    assert "did not answer within" not in log.read_text()


def test_without_the_options_pods_keep_only_their_names_and_dra_claims_are_ignored(
    tmp_path: Path, cluster: tuple[ThreadedApiServer, PodResourcesServer, list[str]]
) -> None:
    _, _, args = cluster
    with collector(tmp_path, *args) as c:
        deadline = time.monotonic() + 20
        while not [s for s in c.metrics().get("DCGM_FI_DEV_GPU_UTIL", []) if s.get("pod") == "trainer"]:
            assert time.monotonic() < deadline, c.log.read_text()[-3000:]
            time.sleep(0.2)
        util = c.metrics()["DCGM_FI_DEV_GPU_UTIL"]
        trainer = next(s for s in util if s.get("pod") == "trainer")
        gpu = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
        assert set(trainer) - gpu == {"pod", "namespace", "container"}  # no pod_uid, no pod labels
        assert not [s for s in util if s.get("pod") == "dra-job"]  # DRA not enabled: GPU 1 has no owner
        assert next(s for s in util if s["gpu"] == "1").get("pod") is None


@pytest.mark.prometheus
def test_mig_instances_hpc_jobs_and_xid_labels_without_kubernetes(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.yaml"
    spec.write_text("gpus: 2\nmig: {1: [1g.18gb, 3g.71gb]}\n")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "0").write_text("1001\n1002\n")
    (jobs / "1.2").write_text("2001\n")
    with (
        collector(tmp_path, "--simulate-spec", str(spec), "--hpc-job-mapping-dir", str(jobs), *POD_UID) as c,
        run_prometheus(tmp_path / "prometheus", [c.url.removeprefix("http://")]) as prom,
    ):
        # each MIG GPU instance has its own series, named as dcgm-exporter names them, beside the whole GPU's
        instances = prom.wait_for('DCGM_FI_DEV_FB_USED{gpu="1",GPU_I_ID!=""}', min_results=2)
        assert {(r["metric"]["GPU_I_ID"], r["metric"]["GPU_I_PROFILE"]) for r in instances} == {
            ("1", "1g.18gb"), ("2", "3g.71gb"),
        }  # fmt: skip
        assert {r["metric"]["UUID"] for r in instances} == {UUIDS[1]}  # the GPU's UUID, as dcgm-exporter has it
        assert [r["metric"].get("hpc_job") for r in instances if r["metric"]["GPU_I_ID"] == "2"] == ["2001"]
        assert prom.query('DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",GPU_I_ID="1"}')
        # GPU 0 is served once per job
        util = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{gpu="0"}', min_results=2)
        assert sorted(r["metric"]["hpc_job"] for r in util) == ["1001", "1002"]
        xid = prom.wait_for('DCGM_FI_DEV_XID_ERRORS{gpu="1",GPU_I_ID=""}')
        labels = xid[0]["metric"]
        assert (labels["err_code"], labels["err_msg"], xid[0]["value"][1]) == ("0", "No Error", "0")
        # the next job's prolog rewrites the file; the epilog of the MIG job removes its file
        (jobs / "0").write_text("1003\n")
        (jobs / "1.2").unlink()
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{gpu="0",hpc_job="1003"}')
        assert not prom.query('DCGM_FI_DEV_GPU_UTIL{hpc_job=~"1001|1002"}')
        prom.wait_for('DCGM_FI_DEV_FB_USED{gpu="1",GPU_I_ID="2",hpc_job=""}')
    log = c.log.read_text()
    assert "--kubernetes-enable-pod-uid has no effect without --kubernetes (-k)" in log


def test_an_allowlist_pattern_that_does_not_compile_stops_the_start(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "collector", "--simulate-gpus", "1", "-k", "--kubernetes-enable-pod-labels",
         "--kubernetes-pod-label-allowlist-regex", "^app,team("],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--kubernetes-pod-label-allowlist-regex (or " in result.stderr
    assert "'team(' is not a valid regular expression" in result.stderr
    assert "Traceback" not in result.stderr
