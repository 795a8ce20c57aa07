"""The command as deployed: ``python -m adapter`` over HTTPS with a self-signed certificate, read by a real kubectl."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import HPA, HPA_TOKEN, STRANGER_TOKEN, Cluster, grant_cluster_roles
from harness.kube.kubectl import kubectl_binary, kubectl_config, run
from harness.processes import free_port
from harness.stores.kinds import on_every_store
from harness.stores.prometheus import Prometheus
from harness.waiting import eventually

CM = "/apis/custom.metrics.k8s.io"


class Served:
    def __init__(self, port: int, cert: Path, kubeconfig: Path, log: Path) -> None:
        self.port = port
        self.cert = cert
        self.kubeconfig = kubeconfig
        self.log = log

    async def kubectl(self, *args: str, context: str = "cert") -> tuple[int, str, str]:
        """kubectl as ``cert`` (alice's client certificate from the client CA) or ``token`` (the HPA's token)."""
        return await run(kubectl_binary(), f"--kubeconfig={self.kubeconfig}", f"--context={context}", *args)


@pytest.fixture
async def served(kube: FakeKubeAPIServer, store: Prometheus, cluster: Cluster, tmp_path: Path) -> AsyncIterator[Served]:
    cluster.publish(kube)
    grant_cluster_roles(kube)
    kube.reviews.grant(group="metrics-readers", verbs=("get", "list"), api_groups=("*",))
    kube.reviews.grant(group="metrics-readers", paths=("/apis/*",))
    kube_config = kube.kubeconfig(tmp_path / "lister-kubeconfig")
    port = free_port()
    certs = tmp_path / "certs"
    log_path = tmp_path / "adapter.log"
    log = log_path.open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "adapter",
        f"--prometheus-url={store.adapter_url}",
        f"--lister-kubeconfig={kube_config}",
        f"--authentication-kubeconfig={kube_config}",
        f"--authorization-kubeconfig={kube_config}",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--cert-dir={certs}",
        "--metrics-relist-interval=30s",
        "--logtostderr=true",
        "--v=2",
        stderr=log,
    )
    cert = certs / "apiserver.crt"
    alice_cert, alice_key = cluster.client_ca.issue("alice", ("metrics-readers",)).write(tmp_path, "alice")
    kubeconfig = kubectl_config(tmp_path / "kubeconfig", f"https://127.0.0.1:{port}", cert, alice_cert, alice_key)

    async def ready() -> bool:
        if proc.returncode is not None:
            raise AssertionError(f"the adapter exited: {log_path.read_text()}")
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
        yield Served(port, cert, kubeconfig, log_path)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 15)
        log.close()
    assert proc.returncode == 0, log_path.read_text()


@on_every_store
async def test_kubectl_reads_the_inference_metrics_an_hpa_and_a_scale_from_zero_read(served: Served) -> None:
    """The engines' queues per pod and the namespace's demand (harness/stores/engines.py; the numbers are worked out in
    tests/adapter/test_inference_metrics.py)."""
    rc, out, err = await served.kubectl(
        "get", "--raw", f"{CM}/v1beta2/namespaces/llm/pods/*/inference_requests_waiting?labelSelector=app%3Dvision"
    )
    assert rc == 0, err
    assert {i["describedObject"]["name"]: i["value"] for i in json.loads(out)["items"]} == {"triton-0": "3"}
    rc, out, err = await served.kubectl(
        "get", "--raw", "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/inference_demand"
    )
    assert rc == 0, err
    body = json.loads(out)
    assert body["kind"] == "ExternalMetricValueList"
    assert [i["value"] for i in body["items"]] == ["40"]


@on_every_store
async def test_kubectl_reads_the_hpa_request_over_https(served: Served) -> None:
    rc, out, err = await served.kubectl(
        "get", "--raw", f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer"
    )
    assert rc == 0, err
    body = json.loads(out)
    assert body["kind"] == "MetricValueList"
    assert {i["describedObject"]["name"]: i["value"] for i in body["items"]} == {"trainer-0": "88", "trainer-1": "40"}


@on_every_store
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


async def test_kubectl_with_a_bearer_token_is_reviewed_and_a_stranger_refused(
    served: Served, kube: FakeKubeAPIServer
) -> None:
    rc, out, err = await served.kubectl(
        "get",
        "--raw",
        f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer",
        context="token",
    )
    assert rc == 0, err
    assert len(json.loads(out)["items"]) == 2
    assert kube.reviews.token_reviews == 1
    assert kube.reviews.access_reviews[-1]["user"] == HPA
    rc, _, err = await served.kubectl(
        "get", "--raw", f"{CM}/v1beta2/nodes/node-a/gpu_utilization", f"--token={STRANGER_TOKEN}", context="token"
    )
    assert rc != 0
    assert 'Error from server (Forbidden): nodes/gpu_utilization.custom.metrics.k8s.io "node-a" is forbidden' in err
    assert HPA_TOKEN not in served.log.read_text()
    assert STRANGER_TOKEN not in served.log.read_text()


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
    assert "rule: built-in default rules: rules[2] (series DCGM_FI_DEV_GPU_UTIL)" in out
    assert "no pods in namespace ml match labelSelector app=nothing" in out
    rc, out, err = await run(*base, "--json", f"{CM}/v1beta2/namespaces/ml/pods/trainer-0/gpu_utilization")
    assert rc == 0, err
    report = json.loads(out)
    assert report["answer"]["items"][0]["value"] == "88"
    rc, out, _ = await run(*base, f"{CM}/v1beta2/namespaces/ml/pods/*/nope")
    assert rc == 1
    assert "NotFound: the server could not find the metric nope for pods" in out


async def test_explain_takes_a_keda_triggers_question(
    kube: FakeKubeAPIServer, prometheus: Prometheus, tmp_path: Path
) -> None:
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
    base = [sys.executable, "-m", "adapter", "explain", f"--prometheus-url={prometheus.url}",
            f"--lister-kubeconfig={kubeconfig}"]  # fmt: skip
    scaler = "keda/ml?metricName=gpu_utilization&labelSelector=app%3Dtrainer&targetValue=70&scalerAddress=x:9443"
    rc, out, err = await run(*base, scaler)
    assert rc == 0, err
    assert f"asks what {CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer asks" in out
    assert "rule: built-in default rules: rules[2] (series DCGM_FI_DEV_GPU_UTIL)" in out
    rc, out, _ = await run(*base, "--json", "keda/ml?metricName=gpu_memory_used&metricType=external&targetValue=1")
    assert rc == 0
    assert json.loads(out)["request"].startswith("/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/gpu_memory_used")
    # what the scaler answers INVALID_ARGUMENT, explain refuses with the same words
    rc, _, err = await run(*base, "keda/ml?metricName=gpu_utilization&targetvalue=70")
    assert rc == 2
    assert "scalerMetadata: unknown key 'targetvalue'" in err
    rc, _, err = await run(*base, "keda/Not_A_Namespace?metricName=gpu_utilization&targetValue=1")
    assert rc == 2
    assert "a scaler request is keda/NAMESPACE" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--secure-port=99999"],
            "--secure-port (or GPUSCALE_ADAPTER_SECURE_PORT): 99999 is outside the valid range 0 to 65535",
        ),
        (["--unknown-flag"], "unknown flag or argument: --unknown-flag"),
        (["explain"], "give one request path"),
        ([], "--prometheus-url (or GPUSCALE_ADAPTER_PROMETHEUS_URL): is required"),
    ],
)
async def test_bad_flags_exit_2_naming_the_problem(args: list[str], message: str) -> None:
    url = ["--prometheus-url=http://127.0.0.1:9"] if args else []
    rc, _, err = await run(sys.executable, "-m", "adapter", *args[:1], *url, *args[1:])
    assert rc == 2
    assert message in err


async def test_explain_with_nothing_to_reach_says_so_without_python_values_or_dangling_colons() -> None:
    rc, out, _ = await run(
        sys.executable, "-m", "adapter", "explain", "--prometheus-url=http://127.0.0.1:9",
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization",
    )  # fmt: skip
    assert rc == 1  # the request's answer would be an error: Prometheus is not there
    assert "objects: all from no Kubernetes API configured: every object Prometheus has a series for\n" in out
    assert "None" not in out
    assert [line for line in out.splitlines() if line.rstrip().endswith(":") and line.strip() != "why:"] == []
    assert "query (built-in default rules: rules[1]): avg by (pod)" in out


async def test_a_port_in_use_is_one_line_naming_the_address_and_the_flags() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, _, err = await run(
            sys.executable, "-m", "adapter", "--prometheus-url=http://127.0.0.1:9", "--insecure-serve-http",
            "--insecure-disable-auth", "--bind-address=127.0.0.1", f"--secure-port={port}",
        )  # fmt: skip
    assert rc == 2
    assert err.splitlines()[-1] == (
        f"gpuscale-adapter: cannot listen on 127.0.0.1:{port} (--bind-address, --secure-port): address already in use"
    )
    assert "Traceback" not in err


async def test_a_broken_rules_file_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("rules:\n- seriesQuery: up\n  metricsQuerry: x\n")
    rc, _, err = await run(
        sys.executable,
        "-m",
        "adapter",
        "--prometheus-url=http://127.0.0.1:9",
        f"--config={config}",
        "--insecure-serve-http",
        "--insecure-disable-auth",
        f"--secure-port={free_port()}",
    )
    assert rc == 2
    assert "rules[0]: unknown key 'metricsQuerry'" in err


async def test_without_a_kubernetes_api_for_reviews_the_adapter_does_not_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "adapter", "--prometheus-url=http://127.0.0.1:9", f"--cert-dir={tmp_path}",
        f"--secure-port={free_port()}",
        "--bind-address=127.0.0.1", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert "authentication and authorization need the Kubernetes API" in err.decode()
    assert "--insecure-disable-auth" in err.decode()


async def test_running_without_authentication_is_said_loudly(
    kube: FakeKubeAPIServer, prometheus: Prometheus, tmp_path: Path
) -> None:
    port = free_port()
    log_path = tmp_path / "adapter.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "adapter", f"--prometheus-url={prometheus.url}",
            f"--lister-kubeconfig={kube.kubeconfig(tmp_path / 'kubeconfig')}", "--insecure-serve-http",
            "--insecure-disable-auth", "--bind-address=127.0.0.1", f"--secure-port={port}", stderr=log,
        )  # fmt: skip
        try:

            async def verbose() -> str | None:
                if proc.returncode is not None:
                    raise AssertionError(log_path.read_text())
                try:
                    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/readyz?verbose") as r:
                        return await r.text() if r.status == 200 else None
                except aiohttp.ClientError:
                    return None

            seen: list[str] = []

            async def answered() -> bool:
                text = await verbose()
                if text is not None:
                    seen.append(text)
                return bool(seen)

            await eventually(answered, within=30, what="the adapter to be ready")
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 15)
    assert "[+]authentication ok, authentication and authorization are DISABLED (--insecure-disable-auth)" in seen[0]
    warnings = [line for line in log_path.read_text().splitlines() if " WARNING " in line and "DISABLED" in line]
    assert len(warnings) == 1, log_path.read_text()
