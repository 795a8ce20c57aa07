"""Replicas answer alike with nothing shared: two ``python -m adapter`` processes, as a Deployment of two runs them
(the same arguments, rules file and serving certificate), against one real Prometheus and one stand-in API server.
Each keeps its own watches and its own relist; every answer of the discovery, custom and external paths is the same
bytes from both, before and after the rules file changes under them. Only an item's timestamp may differ: it is
the time Prometheus evaluated that replica's query, checked to lie within the request."""

from __future__ import annotations

import asyncio
import datetime
import os
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import aiohttp
import pytest

from adapter.config.rules import default_rules_text
from harness.adapter.in_process import populate
from harness.adapter.process import AdapterProcess
from harness.adapter.replicas import replicas
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import HPA, Cluster
from harness.kube.pki import client_context
from harness.stores.prometheus import Prometheus
from harness.waiting import eventually, wait_until

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

CM1, CM2 = "/apis/custom.metrics.k8s.io/v1beta1", "/apis/custom.metrics.k8s.io/v1beta2"
EM = "/apis/external.metrics.k8s.io/v1beta1"
DISCOVERY = ["/apis", "/apis/custom.metrics.k8s.io", CM1, CM2, "/apis/external.metrics.k8s.io", EM, "/openapi/v2"]
CUSTOM = [
    f"{CM2}/namespaces/ml/pods/%2A/gpu_utilization?labelSelector=app%3Dtrainer",
    f"{CM1}/namespaces/ml/pods/%2A/gpu_utilization?labelSelector=app%3Dtrainer",
    f"{CM2}/namespaces/ml/pods/%2A/gpu_utilization",
    f"{CM2}/namespaces/ml/pods/%2A/gpu_memory_used?metricLabelSelector=gpu%20in%20%280%2C2%29",
    f"{CM2}/namespaces/ml/pods/trainer-0/gpu_memory_used",
    f"{CM2}/namespaces/ml/metrics/gpu_memory_used",
    f"{CM2}/namespaces/%2A/gpu_memory_used",
    f"{CM2}/nodes/%2A/gpu_utilization?labelSelector=pool%3Dtrain",
    f"{CM2}/namespaces/serving/pods/infer-0/gpu_utilization",
]
EXTERNAL = [
    f"{EM}/namespaces/ml/gpu_utilization?labelSelector=Hostname%3Dnode-a",
    f"{EM}/namespaces/ml/gpu_memory_used",
    f"{EM}/namespaces/serving/gpu_utilization",
]
REFUSED = {  # errors are answers too, and must not depend on the replica
    f"{CM2}/namespaces/ml/pods/%2A/no_such_metric": 404,
    f"{CM2}/namespaces/ml/pods/%2A/gpu_utilization?labelSelector=app%3D%3D%3D": 400,
    f"{CM2}/namespaces/ml/pods/ghost-0/gpu_utilization": 404,
    f"{EM}/namespaces/ml/no_such_metric": 404,
}
# the rules file, changed: one metric renamed, an external rule added
QUEUE_RULE = """  - seriesQuery: '{__name__="queue_depth",queue!=""}'
    resources:
      overrides: {namespace: {resource: namespace}}
    metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (queue)'
"""
CHANGED = default_rules_text().replace("as: gpu_tensor_active}", "as: gpu_tensor_busy}") + QUEUE_RULE
AFTER_RELOAD = {
    f"{CM2}/namespaces/ml/pods/%2A/gpu_tensor_busy": 200,
    f"{CM2}/namespaces/ml/pods/%2A/gpu_tensor_active": 404,
    f"{EM}/namespaces/ml/queue_depth?labelSelector=queue%3Djobs": 200,
    f"{EM}/namespaces/ml/queue_depth": 200,
}
STAMP = re.compile(rb'"timestamp":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"')


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes  # timestamps replaced
    stamps: int  # how many timestamps it held


class Client:
    """Asks one replica as the aggregation layer does: the front-proxy certificate, the HPA as the user."""

    def __init__(self, adapter: AdapterProcess, cluster: Cluster, workdir: Path) -> None:
        self.adapter = adapter
        self.context = client_context(adapter.cert, cluster.front_proxy, workdir)
        self.session = aiohttp.ClientSession()

    async def get(self, path: str) -> Answer:
        headers = {
            "X-Remote-User": HPA,
            "X-Remote-Group": "system:serviceaccounts",
            "Accept": "application/vnd.kubernetes.protobuf, */*",
        }
        url = f"{self.adapter.url}{path}"
        asked = time.time()
        async with self.session.get(url, headers=headers, ssl=self.context) as resp:
            body = await resp.read()
            status, content_type = resp.status, resp.content_type
        answered = time.time()
        return Answer(status, content_type, _evaluated(body, asked, answered), len(STAMP.findall(body)))


def _evaluated(body: bytes, asked: float, answered: float) -> bytes:
    """``body`` with each timestamp replaced, once it is checked to be a second of the request (Prometheus's
    evaluation time, or that of a cached result at most --metrics-cache-ttl older)."""
    for stamp in STAMP.findall(body):
        at = datetime.datetime.strptime(stamp.decode(), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
        assert int(asked) - 1 <= at.timestamp() <= answered, f"{stamp!r} is not a time of the request"
    return STAMP.sub(b'"timestamp":"<evaluated>"', body)


@pytest.fixture
async def two(prometheus: Prometheus, tmp_path: Path) -> AsyncIterator[tuple[Client, Client, FakeKubeAPIServer]]:
    kube = FakeKubeAPIServer()
    populate(kube)
    await kube.start()
    cluster = Cluster()
    rules = tmp_path / "rules.yaml"
    rules.write_text(default_rules_text())
    args = (f"--config={rules}", "--config-check-interval=200ms")
    try:
        async with replicas(kube, [prometheus.url] * 2, tmp_path, *args, cluster=cluster) as (a, b):
            clients = Client(a, cluster, tmp_path / "client-a"), Client(b, cluster, tmp_path / "client-b")
            try:
                yield clients[0], clients[1], kube
            finally:
                for client in clients:
                    await client.session.close()
    finally:
        await kube.stop()


async def compare(a: Client, b: Client, expected: dict[str, int]) -> list[Answer]:
    """Ask both replicas each path at once; the answers, the same from both, are returned."""
    answers = []
    for path, status in expected.items():
        first, second = await asyncio.gather(a.get(path), b.get(path))
        assert first.status == status, (path, first)
        assert first == second, f"the replicas answered {path} differently:\n{first}\n{second}"
        answers.append(first)
    return answers


async def test_every_replica_gives_the_same_answers_before_and_after_a_rules_change(
    two: tuple[Client, Client, FakeKubeAPIServer], tmp_path: Path
) -> None:
    a, b, kube = two
    # nothing shared: each replica lists and watches for itself. A replica is ready once its LISTs are done; its
    # watches follow them, so on a loaded machine one may not be open yet when both answer /readyz

    def each_watching() -> bool:
        watched = Counter(w.resource for w in kube.watches)
        return {watched[r] for r in ("pods", "namespaces", "nodes")} == {2}

    await wait_until(each_watching, what="a watch of pods, namespaces and nodes from each replica")

    await compare(a, b, dict.fromkeys(DISCOVERY, 200))
    values = await compare(a, b, dict.fromkeys(CUSTOM + EXTERNAL, 200))
    assert all(answer.stamps > 0 for answer in values), "a metric answer without items compares nothing"
    assert b'"name":"trainer-1"' in values[0].body
    assert b'"value":"40"' in values[0].body
    await compare(a, b, REFUSED)

    # the ConfigMap changes: the kubelet swaps the file under both replicas at once
    changed = tmp_path / "rules.yaml.new"
    changed.write_text(CHANGED)
    os.replace(changed, tmp_path / "rules.yaml")

    async def reloaded(client: Client) -> bool:
        custom, external = await asyncio.gather(client.get(CM2), client.get(EM))
        return b"pods/gpu_tensor_busy" in custom.body and b'"name":"queue_depth"' in external.body

    for client in (a, b):
        await eventually(partial(reloaded, client), within=30, what="the changed rules served")
    await compare(a, b, dict.fromkeys(DISCOVERY, 200))
    assert b"gpu_tensor_active" not in (await a.get(CM2)).body
    await compare(a, b, dict.fromkeys(CUSTOM + EXTERNAL, 200))
    queue = await compare(a, b, AFTER_RELOAD)
    assert b'"metricLabels":{"queue":"jobs"}' in queue[2].body
    assert b'"value":"42"' in queue[2].body
    await compare(a, b, REFUSED)
