"""What the dashboard and the rules are checked against: real programs on 127.0.0.1.

- the collector as a process, on the demo's simulated GPUs (three pods on a GPU each, two pods sharing one), with
  the demo's stand-ins for the kubelet's pod-resources API and for the Kubernetes API (which names the pods of the
  shared GPU);
- a stand-in for kube-state-metrics (aiohttp) serving the HPA series the dashboard shows;
- a real Prometheus whose collector job is the shipped one (manifests/prometheus/scrape-configs.yaml), with Kubernetes
  discovery replaced by static targets that carry the labels discovery would set, and the shipped rules loaded; or,
  with ``renamed``, the job as dcgm-exporter's ServiceMonitor makes it: no honor_labels and the collector's own
  namespace/pod/container as target labels, so Prometheus renames the series' own to exported_*.

The asyncio servers run on an event loop in a thread of their own, so tests can block on Prometheus meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from demo.kube_api import FakeKubeAPIServer
from demo.kubelet import FakePod, PodResourcesServer
from demo.node import simulated_setup
from demo.prometheus import Prometheus, free_port, run_prometheus
from tests.deploy.manifests import ROOT
from tests.deploy.prometheus_files import RULES, offline_scrape_config

T = TypeVar("T")
NODE = "gpu-node-1"  # NODE_NAME of the collector, so its Hostname label, and the node its job's instance names
NAMESPACE = "ml"
COLLECTOR_POD = ("gpuscale", "gpuscale-collector-x1", "collector")  # namespace, pod, container of the collector
KSM_TEXT = """\
# TYPE kube_horizontalpodautoscaler_status_current_replicas gauge
kube_horizontalpodautoscaler_status_current_replicas{namespace="ml",horizontalpodautoscaler="trainer"} 3
# TYPE kube_horizontalpodautoscaler_status_desired_replicas gauge
kube_horizontalpodautoscaler_status_desired_replicas{namespace="ml",horizontalpodautoscaler="trainer"} 1
# TYPE kube_horizontalpodautoscaler_spec_max_replicas gauge
kube_horizontalpodautoscaler_spec_max_replicas{namespace="ml",horizontalpodautoscaler="trainer"} 8
"""


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="live-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.run(self.loop.shutdown_asyncgens())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()


async def _serve_ksm() -> tuple[web.AppRunner, str]:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=KSM_TEXT, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"{host}:{port}"


def prometheus_config(collector: str, decoy: str, ksm: str, renamed: bool = False) -> dict[str, Any]:
    def pod(target: str, app: str) -> dict[str, Any]:
        namespace, name, container = COLLECTOR_POD
        labels = {
            "__meta_kubernetes_pod_label_app_kubernetes_io_name": app,
            "__meta_kubernetes_pod_container_port_name": "metrics",
            "__meta_kubernetes_pod_node_name": NODE,
            "__meta_kubernetes_namespace": namespace,
            "__meta_kubernetes_pod_name": name,
            "__meta_kubernetes_pod_container_name": container,
        }
        return {"targets": [target], "labels": labels}

    # another pod of the namespace next to the collector: the job's keep rule must drop it
    discovered = {"gpuscale-collector": [pod(collector, "gpuscale-collector"), pod(decoy, "something-else")]}
    discovered["gpuscale-adapter"] = []
    shipped = offline_scrape_config(discovered)
    [collector_job] = [j for j in shipped["scrape_configs"] if j["job_name"] == "gpuscale-collector"]
    # the shipped 5 s, shortened so the test needs seconds, not minutes
    collector_job.update(scrape_interval="1s", scrape_timeout="1s")
    if renamed:
        # what the Prometheus Operator generates for dcgm-exporter's ServiceMonitor (honorLabels false)
        collector_job["honor_labels"] = False
        collector_job["relabel_configs"] += [
            {"source_labels": [f"__meta_kubernetes_{meta}"], "target_label": label}
            for meta, label in (("namespace", "namespace"), ("pod_name", "pod"), ("pod_container_name", "container"))
        ]
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [collector_job, {"job_name": "kube-state-metrics", "static_configs": [{"targets": [ksm]}]}],
    }


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as resp:
            if resp.status == 200:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the collector did not come up: {log.read_text()[-2000:]}")
        time.sleep(0.2)


@contextlib.contextmanager
def live_monitoring(workdir: Path, renamed: bool = False) -> Iterator[Prometheus]:
    loop = LoopThread()
    kube = FakeKubeAPIServer()
    kubelet = PodResourcesServer(str(workdir / "kubelet.sock")).start()
    process: subprocess.Popen[bytes] | None = None
    ksm: web.AppRunner | None = None
    try:
        loop.run(kube.start())
        collector_args, pods = simulated_setup(workdir)

        async def put_pods() -> None:  # on the API server's loop: it wakes its watches
            for p in pods:
                uid = p.uid or f"uid-{p.name}"
                kube.put("pods", p.name, p.labels, namespace=NAMESPACE, uid=uid, spec={"nodeName": NODE})

        loop.run(put_pods())
        kubelet.pods = [FakePod(NAMESPACE, p.name, {"main": [(p.resource, list(p.device_ids))]}) for p in pods]
        port = free_port()
        log = workdir / "collector.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "collector", "-a", f"127.0.0.1:{port}", "--kubernetes",
                 "--kubeconfig", str(kube.kubeconfig(workdir / "kubeconfig")),
                 "--pod-resources-kubelet-socket", kubelet.socket_path, *collector_args],
                cwd=ROOT, env={**os.environ, "NODE_NAME": NODE}, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        _wait_ready(f"http://127.0.0.1:{port}/health", process, log)
        ksm, ksm_target = loop.run(_serve_ksm())
        config = prometheus_config(f"127.0.0.1:{port}", ksm_target, ksm_target, renamed)
        with run_prometheus(workdir / "prometheus", extra_config=config) as prometheus:
            yield prometheus
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if ksm is not None:
            loop.run(ksm.cleanup())
        kubelet.stop()
        loop.run(kube.stop())
        loop.close()
