"""Specs written for the images we replace, run through the image's real entry point as Kubernetes runs an
args-only container: the Dockerfile's ENTRYPOINT (the installed console script), then the spec's ``args``.

The argument lists are prometheus-adapter's and dcgm-exporter's own: prometheus-adapter v0.12.0's
deploy/manifests/deployment.yaml, the prometheus-community chart's templates/deployment.yaml (current, and before
v0.11 with --logtostderr), and dcgm-exporter's chart (deployment/values.yaml ``arguments``). Only values that point
at this machine differ (URLs, ports, paths), and the kubeconfig flags prometheus-adapter takes for running outside
a cluster (the chart's ``extraArguments``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from adapter.config.rules import default_rules_text
from harness.deploy.dockerfile import parse
from harness.deploy.manifests import ROOT
from harness.deploy.peer_args import KUBE_PROMETHEUS_CIPHERS
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import Cluster, grant_cluster_roles
from harness.kube.kubectl import kubectl_binary, kubectl_config, run
from harness.processes import free_port
from harness.stores.prometheus import Prometheus
from harness.waiting import eventually


def entry_point() -> list[str]:
    """The image's ENTRYPOINT, its program resolved as the image's PATH would: the installed console script."""
    [instruction] = parse(ROOT / "Dockerfile").stages[-1].all("ENTRYPOINT")
    program, *rest = instruction.args
    script = Path(sys.executable).parent / program
    assert script.exists(), f"{program} is not installed as a console script (pip install -e .)"
    return [str(script), *rest]


def logged(log: Path) -> str:
    return log.read_text()


@asynccontextmanager
async def container(
    args: list[str], log: Path, env: Mapping[str, str] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """An args-only container: the entry point, then ``args`` (the image's CMD would be replaced by them)."""
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *entry_point(), *args, stdout=out, stderr=out, env={**os.environ, **(env or {})}
        )
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 15)
    assert proc.returncode == 0, logged(log)


def prometheus_adapter_manifest(port: int, certs: Path, config: Path, prometheus: str) -> list[str]:
    """deploy/manifests/deployment.yaml (kube-prometheus's), in its order."""
    return [
        f"--cert-dir={certs}",
        f"--config={config}",
        "--metrics-relist-interval=1m",
        f"--prometheus-url={prometheus}/",
        f"--secure-port={port}",
        f"--tls-cipher-suites={KUBE_PROMETHEUS_CIPHERS}",
    ]


def prometheus_adapter_chart(port: int, certs: Path, config: Path, prometheus: str, old: bool = False) -> list[str]:
    """templates/deployment.yaml with the chart's default values (logLevel 4, relist 1m)."""
    return [
        "/adapter",
        f"--secure-port={port}",
        f"--cert-dir={certs}",
        *(["--logtostderr=true"] if old else []),
        f"--prometheus-url={prometheus}",
        "--metrics-relist-interval=1m",
        "--v=4",
        f"--config={config}",
    ]


class Setup:
    def __init__(self, kube: FakeKubeAPIServer, cluster: Cluster, prometheus: Prometheus, tmp_path: Path) -> None:
        cluster.publish(kube)
        grant_cluster_roles(kube)
        kube.reviews.grant(group="metrics-readers", verbs=("get", "list"), api_groups=("*",))
        kube.reviews.grant(group="metrics-readers", paths=("/apis/*",))
        self.kube_config = kube.kubeconfig(tmp_path / "in-cluster")
        self.config = tmp_path / "config.yaml"  # the mounted ConfigMap
        self.config.write_text(default_rules_text())
        self.certs = tmp_path / "serving-cert"
        self.port = free_port()
        self.prometheus = prometheus.url
        self.alice = cluster.client_ca.issue("alice", ("metrics-readers",)).write(tmp_path, "alice")
        self.tmp_path = tmp_path

    def out_of_cluster(self) -> list[str]:
        """The chart's extraArguments for an adapter that runs outside the cluster it serves."""
        return [f"--{flag}-kubeconfig={self.kube_config}" for flag in ("lister", "authentication", "authorization")] + [
            "--bind-address=127.0.0.1"
        ]

    async def serves(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        cert = self.certs / "apiserver.crt"

        async def ready() -> bool:
            if proc.returncode is not None:
                raise AssertionError(f"the container exited: {logged(log)}")
            if not cert.exists():
                return False
            try:
                async with (
                    aiohttp.ClientSession() as s,
                    s.get(f"https://127.0.0.1:{self.port}/readyz", ssl=ssl.create_default_context(cafile=cert)) as r,
                ):
                    return r.status == 200
            except aiohttp.ClientError:
                return False

        await eventually(ready, within=30, what="the adapter to serve")
        kubeconfig = kubectl_config(self.tmp_path / "kubeconfig", f"https://127.0.0.1:{self.port}", cert, *self.alice)
        rc, out, err = await run(
            kubectl_binary(), f"--kubeconfig={kubeconfig}", "get", "--raw", "/apis/custom.metrics.k8s.io/v1beta2"
        )
        assert rc == 0, err
        assert "pods/gpu_utilization" in {r["name"] for r in json.loads(out)["resources"]}


@pytest.fixture
def setup(kube: FakeKubeAPIServer, cluster: Cluster, prometheus: Prometheus, tmp_path: Path) -> Setup:
    return Setup(kube, cluster, prometheus, tmp_path)


async def test_prometheus_adapters_own_manifest_runs_the_adapter(setup: Setup) -> None:
    s = setup
    args = prometheus_adapter_manifest(s.port, s.certs, s.config, s.prometheus) + s.out_of_cluster()
    log = s.tmp_path / "container.log"
    async with container(args, log) as proc:
        await s.serves(proc, log)


@pytest.mark.parametrize("old", [False, True], ids=["chart", "chart-before-v0.11"])
async def test_the_helm_charts_args_with_a_leading_adapter_run_the_adapter(setup: Setup, old: bool) -> None:
    s = setup
    args = prometheus_adapter_chart(s.port, s.certs, s.config, s.prometheus, old) + s.out_of_cluster()
    log = s.tmp_path / "container.log"
    async with container(args, log) as proc:
        await s.serves(proc, log)
    text = log.read_text()
    if old:
        assert "--logtostderr is accepted and has no effect: the adapter logs to stderr" in text
    else:
        assert "accepted and has no effect" not in text


async def metrics_served(
    port: int, proc: asyncio.subprocess.Process, log: Path, series: str = "DCGM_FI_DEV_GPU_UTIL{"
) -> str:
    body = ""

    async def up() -> bool:
        nonlocal body
        if proc.returncode is not None:
            raise AssertionError(f"the container exited: {logged(log)}")
        try:
            async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as r:
                body = await r.text()
                return r.status == 200 and series in body
        except aiohttp.ClientError:
            return False

    await eventually(up, within=30, what="the collector to serve /metrics")
    return body


@pytest.mark.parametrize("given", ["chart", "none"])
async def test_dcgm_exporters_daemonset_args_run_the_collector(tmp_path: Path, given: str) -> None:
    """dcgm-exporter's chart passes ``-f <counters file>`` (mounted from a ConfigMap); its plain manifest passes none.
    The environment is what a DaemonSet sets: dcgm-exporter's listen address, and simulated GPUs (no GPU here)."""
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\nDCGM_FI_DEV_FB_USED, gauge, FB used.\n")
    args = ["-f", str(counters)] if given == "chart" else []
    port = free_port()
    env = {"DCGM_EXPORTER_LISTEN": f"127.0.0.1:{port}", "GPUSCALE_COLLECTOR_SIMULATE_GPUS": "1"}
    log = tmp_path / "container.log"
    # the counters file given is the one read; without one, the built-in file: dcgm-exporter 4.10's names (a ratio
    # for utilization, bytes for memory, clocks in Hz among its fields)
    utilization = "DCGM_FI_DEV_GPU_UTIL{" if given == "chart" else "DCGM_FI_DEV_GPU_UTIL_RATIO{"
    async with container(args, log, env) as proc:
        body = await metrics_served(port, proc, log, utilization)
    assert ("DCGM_FI_DEV_FB_USED{" in body) is (given == "chart")
    assert ("DCGM_FI_DEV_FB_USED_BYTES{" in body) is (given == "none")
    assert ("DCGM_FI_DEV_SM_CLOCK_HERTZ{" in body) is (given == "none")
