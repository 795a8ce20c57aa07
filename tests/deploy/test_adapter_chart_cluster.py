"""The chart against a cluster (the stand-in API server, over TLS, as ``helm install --dry-run=server`` reads it): a
cluster holds one v1beta1.external.metrics.k8s.io, and where another server holds it (KEDA's metrics server) the
chart leaves it alone and says so, instead of taking every External metric and ScaledObject from it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapter.security.tls import self_signed
from harness.deploy import adapter_chart, helm
from harness.kube.api import FakeKubeAPIServer
from harness.kube.discovery import Served

EXTERNAL = "v1beta1.external.metrics.k8s.io"
APISERVICES = "apiservices.apiregistration.k8s.io"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[FakeKubeAPIServer, Path]]:
    kube = FakeKubeAPIServer()
    # the kinds the chart makes that the stand-in does not serve by default (Helm maps each before an install)
    kube.discovery.add(Served("apiregistration.k8s.io", ("v1",), "apiservices", "apiservice", "APIService", False))
    for kind, namespaced in (
        ("Role", True),
        ("RoleBinding", True),
        ("ClusterRole", False),
        ("ClusterRoleBinding", False),
    ):
        plural = f"{kind.lower()}s"
        kube.discovery.add(Served("rbac.authorization.k8s.io", ("v1",), plural, kind.lower(), kind, namespaced))
    cert, key = self_signed(["127.0.0.1"])
    (tmp_path / "apiserver.crt").write_bytes(cert)
    (tmp_path / "apiserver.key").write_bytes(key)
    await kube.start(serving=(tmp_path / "apiserver.crt", tmp_path / "apiserver.key"))
    try:
        yield kube, kube.kubeconfig(tmp_path / "kubeconfig")
    finally:
        await kube.stop()


async def install(kubeconfig: Path, *settings: str) -> tuple[set[str], str]:
    # in a thread: the stand-in answers Helm on this event loop
    done = await asyncio.to_thread(adapter_chart.install_dry_run, (), settings, "gpuscale", kubeconfig)
    rendered = helm.manifest(done)
    return {a["metadata"]["name"] for a in rendered.all("APIService")}, helm.notes(done)


async def test_keda_holding_external_metrics_keeps_them(cluster: tuple[FakeKubeAPIServer, Path]) -> None:
    kube, kubeconfig = cluster
    kube.put(APISERVICES, EXTERNAL, spec={"service": {"name": "keda-operator-metrics-apiserver", "namespace": "keda"}})
    names, notes = await install(kubeconfig)
    assert names == {"v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io"}
    assert "external.metrics.k8s.io is left to keda/keda-operator-metrics-apiserver" in notes
    assert kube.count(f"/apis/apiregistration.k8s.io/v1/apiservices/{EXTERNAL}") >= 1


async def test_a_cluster_without_one_gets_the_adapters(cluster: tuple[FakeKubeAPIServer, Path]) -> None:
    _, kubeconfig = cluster
    names, notes = await install(kubeconfig)
    assert EXTERNAL in names
    assert "this release holds it" in notes
