"""Watches that receive what no API server should send keep following the cluster: a line over the client's limit,
a JSON value that is not an event, labels given as a string. The report this answers: one such line ended the
watcher, and a client CA removed afterwards stayed trusted; the pod cache served stale wildcard answers."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from adapter.backends.auth_api import CONFIGMAP_NAME
from harness.adapter.in_process import Adapter, MakeSecure, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import Cluster, status_of
from harness.stores.prometheus import Prometheus
from harness.waiting import eventually, wait_until

OVERSIZED = b"x" * (64 << 20)  # 64 MiB without a newline
WILDCARD = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/%2A/gpu_utilization"


def wrong_labels(name: str) -> bytes:
    """A pod event whose labels are a string, not a map."""
    event = {"type": "MODIFIED", "object": {"metadata": {"name": name, "namespace": "ml", "labels": "app=trainer"}}}
    return json.dumps(event).encode() + b"\n"


MALFORMED = {"oversized line": OVERSIZED, "not an event": b"[1,2,3]\n", "labels as a string": wrong_labels("x")}


async def inject(kube: FakeKubeAPIServer, resource: str, raw: bytes) -> None:
    await wait_until(lambda: any(w.resource == resource for w in kube.watches), what=f"a watch of {resource}")
    assert kube.inject(resource, raw) >= 1


@pytest.mark.parametrize("line", ["oversized line", "not an event"])
async def test_a_client_ca_removed_after_a_malformed_configmap_line_is_no_longer_trusted(
    make_secure: MakeSecure,
    cluster: Cluster,
    kube: FakeKubeAPIServer,
    caplog: pytest.LogCaptureFixture,
    line: str,
) -> None:
    adapter = await make_secure()
    bob = cluster.client_ca.issue("bob", ("system:masters",))
    assert await status_of(adapter, bob) == 200
    await inject(kube, "configmaps", MALFORMED[line])
    await wait_until(lambda: "watching the ConfigMap" in caplog.text, what="the failure to be logged")
    cluster.publish(kube, {k: v for k, v in cluster.configmap().items() if k != "client-ca-file"})

    async def refused() -> bool:
        return await status_of(adapter, bob) == "tls"

    await eventually(refused, within=15, what="the removed client CA to be refused")
    failures = [r for r in caplog.records if "watching the ConfigMap" in r.getMessage()]
    assert failures[0].levelno == logging.WARNING
    why = "LineTooLong" if line == "oversized line" else "not a JSON object"
    assert why in failures[0].getMessage()
    assert CONFIGMAP_NAME in failures[0].getMessage()


@pytest.mark.parametrize("line", list(MALFORMED))
async def test_the_pod_cache_follows_changes_after_a_malformed_event(
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    make_adapter: Callable[..., Awaitable[Adapter]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    line: str,
) -> None:
    adapter = await make_adapter(settings_for(prometheus.url, kube.kubeconfig(tmp_path / "kubeconfig")))

    async def names(selector: str) -> set[str]:
        body = await adapter.get(WILDCARD, labelSelector=selector)
        return {item["describedObject"]["name"] for item in body["items"]}

    before = await names("app=trainer")
    assert "trainer-1" in before
    assert "share-a" not in before
    await inject(kube, "pods", MALFORMED[line])
    await wait_until(lambda: "pods: " in caplog.text, what="the failure to be logged")
    kube.put("pods", "share-a", {"app": "trainer"}, namespace="ml")
    kube.delete("pods", "trainer-1", namespace="ml")

    async def followed() -> bool:
        return await names("app=trainer") == before - {"trainer-1"} | {"share-a"}

    await eventually(followed, within=15, what="the wildcard answer to follow the pods")
