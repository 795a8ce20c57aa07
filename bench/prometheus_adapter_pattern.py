"""prometheus-adapter's calls for a wildcard pods request, for bench/scale_bench.py to measure against.

What kubernetes-sigs/prometheus-adapter does per request (pkg/custom-provider/provider.go, ``getMultiple`` →
``buildQuery``): a LIST of the resource in the namespace with the request's labelSelector through its dynamic client
(no informer, no cache), the object names put into the rule's metricsQuery as ``pod=~"a|b|..."``, one instant query
to Prometheus at "now" (no cache, no sharing of identical queries), and an item for each listed object that has a
value. This server does the same calls with the same payloads, for the built-in rule of gpu_utilization:

    python -m bench.prometheus_adapter_pattern PROMETHEUS_URL KUBECONFIG PORT
"""

from __future__ import annotations

import asyncio
import datetime
import os
import re
import sys
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

QUERIES = {
    "gpu_utilization": 'avg by (pod) (DCGM_FI_DEV_GPU_UTIL{{namespace="{ns}",pod=~"{names}",exported_pod=""}})',
}


def quote_meta(name: str) -> str:
    """Go's regexp.QuoteMeta, which prometheus-adapter applies to each name."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", name)


def milli(value: str) -> str:
    # prometheus-adapter: resource.NewMilliQuantity(int64(value*1000.0), DecimalSI), serialized as "<n>m"
    return f"{int(float(value) * 1000)}m"


def app(prometheus: str, api: str, token: str) -> web.Application:
    application = web.Application()
    session_key = web.AppKey("session", aiohttp.ClientSession)

    async def session_ctx(a: web.Application):  # type: ignore[no-untyped-def]
        a[session_key] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        yield
        await a[session_key].close()

    async def wildcard(request: web.Request) -> web.Response:
        session = request.app[session_key]
        ns, metric = request.match_info["namespace"], request.match_info["metric"]
        selector = request.query.get("labelSelector", "")
        headers = {"Authorization": f"Bearer {token}"}
        async with session.get(f"{api}/api/v1/namespaces/{ns}/pods", params={"labelSelector": selector},
                               headers=headers) as resp:  # fmt: skip
            listing = await resp.json()
        names = [item["metadata"]["name"] for item in listing["items"]]
        query = QUERIES[metric].format(ns=ns, names="|".join(map(quote_meta, names)))
        async with session.get(f"{prometheus}/api/v1/query", params={"query": query}) as resp:
            answer = await resp.json()
        values = {s["metric"].get("pod", ""): s["value"][1] for s in answer["data"]["result"]}
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        items = [
            {
                "describedObject": {"kind": "Pod", "namespace": ns, "name": n, "apiVersion": "/v1"},
                "metric": {"name": metric, "selector": None},
                "timestamp": now,
                "value": milli(values[n]),
            }
            for n in names
            if n in values
        ]
        return web.json_response(
            {"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {}, "items": items}
        )

    application.cleanup_ctx.append(session_ctx)
    application.router.add_get("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/pods/*/{metric}", wildcard)
    return application


def main() -> None:
    prometheus, kubeconfig, port = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    config = yaml.safe_load(kubeconfig.read_text())
    api = config["clusters"][0]["cluster"]["server"]
    token = config["users"][0]["user"]["token"]
    if cpu := os.environ.get("SCALE_BENCH_CPU"):
        os.sched_setaffinity(0, {int(cpu)})
    try:
        import uvloop  # the adapter runs on it where installed: the same event loop for both

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    web.run_app(app(prometheus, api, token), host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
