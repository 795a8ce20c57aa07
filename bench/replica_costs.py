"""What each adapter replica costs the Kubernetes API and Prometheus.

Starts two adapters as the Deployment runs them (TLS, delegated authentication against the stand-in API server, the
built-in rules), each behind its own forwarding proxy to one real Prometheus, and counts: the API server's requests
until both are ready and the watches they hold, each replica's Prometheus calls for its first relist and over
``--watch`` seconds of relists every ``--relist`` seconds, and the queries of ``--requests`` HPA requests to one
replica, each sent after the value cache's time to live. Prints a Markdown table.

    python -m bench.replica_costs [--relist 10] [--watch 32] [--requests 20]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections import Counter
from pathlib import Path

import aiohttp

from harness.adapter.in_process import populate
from harness.adapter.process import AdapterProcess
from harness.adapter.replicas import replicas
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import HPA, Cluster
from harness.kube.pki import client_context
from harness.stores.exporter import GPU, Exporter, exposition
from harness.stores.prometheus import run_prometheus
from harness.stores.proxy import PrometheusProxy

HPA_PATH = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/%2A/gpu_utilization?labelSelector=app%3Dtrainer"
REPLICAS = 2


async def measure(tmp: Path, relist: int, watch: int, requests: int) -> list[tuple[str, str]]:
    rows = []
    with Exporter(exposition()) as exporter, run_prometheus(tmp / "prom", scrape_targets=[exporter.target]) as prom:
        prom.wait_for(GPU)
        kube = FakeKubeAPIServer()
        populate(kube)
        await kube.start()
        proxies = [PrometheusProxy(prom.url) for _ in range(REPLICAS)]
        for proxy in proxies:
            await proxy.start()
        cluster = Cluster()
        try:
            urls = [p.url for p in proxies]
            async with replicas(kube, urls, tmp, f"--metrics-relist-interval={relist}s", cluster=cluster) as started:
                at_start = Counter(f"{'WATCH' if q.get('watch') else 'GET'} {p}" for p, q in kube.requests)
                rows.append(("API requests until ready", _per_replica(at_start)))
                rows.append(("watches held open", _per_replica(Counter(w.resource for w in kube.watches))))
                first = [Counter(s.path for s in p.seen) for p in proxies]
                rows.append(("Prometheus calls of the first relist", " / ".join(_calls(c) for c in first)))
                api_before = len(kube.requests)
                await asyncio.sleep(watch)
                later = [Counter(s.path for s in p.seen) - c for p, c in zip(proxies, first, strict=True)]
                what = f"Prometheus calls in {watch} s, relisting every {relist} s"
                rows.append((what, " / ".join(_calls(c) for c in later)))
                rows.append((f"API requests in those {watch} s", str(len(kube.requests) - api_before)))
                queries = await _hpa_requests(started[0], cluster, proxies[0], tmp, requests)
                rows.append(("queries per HPA request, cache expired", f"{queries / requests:g}"))
        finally:
            for proxy in proxies:
                await proxy.close()
            await kube.stop()
    return rows


async def _hpa_requests(
    adapter: AdapterProcess, cluster: Cluster, proxy: PrometheusProxy, tmp: Path, count: int
) -> int:
    ssl = client_context(adapter.cert, cluster.front_proxy, tmp / "client")
    headers = {"X-Remote-User": HPA, "X-Remote-Group": "system:serviceaccounts"}
    before = proxy.count("/api/v1/query")
    async with aiohttp.ClientSession() as session:
        for _ in range(count):
            async with session.get(adapter.url + HPA_PATH, headers=headers, ssl=ssl) as resp:
                assert resp.status == 200, await resp.text()
            await asyncio.sleep(0.3)  # past --metrics-cache-ttl (250ms)
    return proxy.count("/api/v1/query") - before


def _per_replica(counts: Counter[str]) -> str:
    return ", ".join(f"{n // REPLICAS} {what}" for what, n in sorted(counts.items()))


def _calls(counts: Counter[str]) -> str:
    return ", ".join(f"{n} {path}" for path, n in sorted(counts.items())) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--relist", type=int, default=10)
    parser.add_argument("--watch", type=int, default=32)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(measure(Path(tmp), args.relist, args.watch, args.requests))
    print(f"| {REPLICAS} replicas | per replica (Prometheus: replica 1 / replica 2) |\n|---|---|")
    for what, value in rows:
        print(f"| {what} | {value} |")


if __name__ == "__main__":
    main()
