"""Random requests against the running adapter: every answer is a JSON object with kind, never a 500.

Paths are built from the grammar's own pieces (group, version, resource names, '*', %2A, selectors with operators,
metacharacters, percent-encodings, unicode) so that most reach deep into parsing rather than stopping at a 404.
"""

from __future__ import annotations

import random
from urllib.parse import quote

from harness.adapter.in_process import Adapter

PIECES = ["apis", "custom.metrics.k8s.io", "external.metrics.k8s.io", "v1beta1", "v1beta2", "v1", "namespaces", "ml",
          "pods", "nodes", "deployments.apps", "metrics", "*", "%2A", "%2F", "%00", "%0A", "%ZZ", "..", ".", "",
          "gpu_utilization", "gpu_memory_used", "GPU_Utilization", "trainer-0", "node-a", "x" * 300, "é", "日本",
          "a b", "a;b", "a?b", "a#b"]  # fmt: skip
SELECTORS = ["app=trainer", "app in (trainer,other)", "!app", "app", "app notin ()", "app=", "=", "in (", "a,b,",
             "app==trainer,team!=ml", "app=tr\"ainer", "app=\\", "app=|", "app=.*", "x" * 100 + "=y", "app=é",
             "app in (" + ",".join(str(i) for i in range(500)) + ")", "a>1", "a<x"]  # fmt: skip
ALLOWED = {200, 400, 404, 405, 406, 503}


SHAPES = [
    "apis/custom.metrics.k8s.io/{v}/namespaces/{p}/{p}/{p}/{p}",
    "apis/custom.metrics.k8s.io/{v}/{p}/{p}/{p}",
    "apis/custom.metrics.k8s.io/{v}/namespaces/{p}/metrics/{p}",
    "apis/external.metrics.k8s.io/v1beta1/namespaces/{p}/{p}",
]


def random_request(rng: random.Random) -> tuple[str, dict[str, str]]:
    if rng.random() < 0.5:  # a shape the API has, with random parts: reaches selector and rule handling
        shape = rng.choice(SHAPES).replace("{v}", rng.choice(["v1beta1", "v1beta2"]))
        segments = [rng.choice(PIECES) if part == "{p}" else part for part in shape.split("/")]
    elif rng.random() < 0.8:
        segments = ["apis"] + [rng.choice(PIECES) for _ in range(rng.randint(0, 8))]
    else:
        segments = [rng.choice(PIECES)]
    path = "/" + "/".join(segments)
    params = {}
    if rng.random() < 0.6:
        params["labelSelector"] = rng.choice(SELECTORS)
    if rng.random() < 0.3:
        params["metricLabelSelector"] = rng.choice(SELECTORS)
    return path, params


async def test_random_requests_never_get_a_500(adapter: Adapter) -> None:
    rng = random.Random(42)
    seen: dict[int, int] = {}
    for _ in range(1500):
        path, params = random_request(rng)
        query = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())
        resp = await adapter.client.get(path + ("?" + query if query else ""))
        text = await resp.text()
        seen[resp.status] = seen.get(resp.status, 0) + 1
        assert resp.status in ALLOWED, f"{resp.status} for {path}?{query}: {text[:300]}"
        assert "Traceback" not in text
        if resp.status != 200 or (path.startswith("/apis/") and ".." not in path):  # the client resolves ".."
            assert resp.content_type == "application/json", path
            body = await resp.json()
            assert "kind" in body
            if resp.status >= 400:
                assert body["kind"] == "Status"
                assert body["code"] == resp.status
    for status in (200, 400, 404):  # the mix reached deep: answers, selector errors and unknown metrics
        assert seen.get(status, 0) > 20, seen


async def test_other_methods_are_refused_cleanly(adapter: Adapter) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        resp = await adapter.client.request(method, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/x")
        assert resp.status == 405
        body = await resp.json()
        assert body["kind"] == "Status"
        assert body["reason"] == "MethodNotAllowed"
