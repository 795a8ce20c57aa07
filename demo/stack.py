"""The whole chain on 127.0.0.1: collector → Prometheus (1 s scrape) → adapter → custom metrics API.

Kubernetes itself cannot run here, so two stand-ins take its place: an API server that lists and watches pod
metadata (for the adapter's selectors and the collector's pod directory) and the kubelet's pod-resources socket
(which pod holds which GPU). Everything else is the real program: the collector with its pod mapping, a real
Prometheus, the adapter as a separate process answering the same URLs the HPA asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from harness.kube.api import FakeKubeAPIServer
from harness.kube.wire import parse_quantity
from harness.node.kubelet import FakePod, PodResourcesServer
from harness.processes import free_port
from harness.stores.prometheus import Prometheus, run_prometheus

ROOT = Path(__file__).resolve().parents[1]
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"


@dataclass(frozen=True)
class Pod:
    name: str
    labels: dict[str, str]
    device_ids: tuple[str, ...]  # what the device plugin gave it: GPU UUIDs, UUID::n replicas, MIG-<uuid>
    resource: str = "nvidia.com/gpu"
    uid: str = ""


@dataclass
class Stack:
    workdir: Path
    collector_args: Sequence[str] = ()
    namespace: str = "ml"
    node: str = "demo-node"
    adapter_args: Sequence[str] = ()
    kube: FakeKubeAPIServer = field(default_factory=FakeKubeAPIServer)
    collector_url: str = ""
    adapter_url: str = ""
    prometheus: Prometheus | None = None
    _kubelet: PodResourcesServer | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _exit: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Stack:
        try:
            await self._start()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        await self.kube.start()
        kubeconfig = self.kube.kubeconfig(self.workdir / "kubeconfig")
        self.kube.put("namespaces", self.namespace, {"kubernetes.io/metadata.name": self.namespace})
        self.kube.put("nodes", self.node, {"kubernetes.io/hostname": self.node})
        self._kubelet = PodResourcesServer(str(self.workdir / "kubelet.sock")).start()
        collector_port = free_port()
        self.collector_url = f"http://127.0.0.1:{collector_port}"
        self._spawn(
            "collector",
            ["-m", "collector", "-a", f"127.0.0.1:{collector_port}", "-k", "--kubeconfig", str(kubeconfig),
             "--pod-resources-kubelet-socket", self._kubelet.socket_path, *self.collector_args],
            {"NODE_NAME": self.node},
        )  # fmt: skip
        self.prometheus = self._exit.enter_context(
            run_prometheus(self.workdir / "prometheus", [f"127.0.0.1:{collector_port}"], scrape_interval="1s")
        )
        adapter_port = free_port()
        self.adapter_url = f"http://127.0.0.1:{adapter_port}"
        self._spawn(
            "adapter",
            ["-m", "adapter", f"--prometheus-url={self.prometheus.url}", f"--lister-kubeconfig={kubeconfig}",
             "--insecure-serve-http", "--insecure-disable-auth", "--bind-address=127.0.0.1",
             f"--secure-port={adapter_port}",
             "--metrics-relist-interval=2s", *self.adapter_args],
            {},
        )  # fmt: skip
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        await self._wait_http(f"{self.collector_url}/health", "collector")
        await self._wait_http(f"{self.adapter_url}/livez", "adapter")

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        self._exit.callback(log.close)
        process = subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT
        )
        self.processes[name] = process

    async def _wait_http(self, url: str, name: str, within: float = 60.0) -> None:
        assert self._session is not None
        deadline = time.monotonic() + within
        while True:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with self._session.get(url) as resp:
                    if resp.status < 500:
                        return
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes.values()):
                logs = {p.name: p.read_text()[-1500:] for p in self.workdir.glob("*.log")}
                raise RuntimeError(f"{name} did not come up; logs: {logs}")
            await asyncio.sleep(0.2)

    def set_pods(self, pods: Sequence[Pod]) -> None:
        """Make these the pods on the node: in the API server's list and watch, and in the kubelet's answer."""
        assert self._kubelet is not None
        current = {name for (ns, name) in self.kube.objects.get("pods", {}) if ns == self.namespace}
        for pod in pods:
            self.kube.put("pods", pod.name, pod.labels, namespace=self.namespace, uid=pod.uid or f"uid-{pod.name}",
                          spec={"nodeName": self.node})  # fmt: skip
        for gone in current - {p.name for p in pods}:
            self.kube.delete("pods", gone, namespace=self.namespace)
        self._kubelet.pods = [
            FakePod(self.namespace, p.name, {"main": [(p.resource, list(p.device_ids))]}) for p in pods
        ]

    async def get(self, path: str) -> tuple[int, dict[str, Any]]:
        assert self._session is not None
        async with self._session.get(f"{self.adapter_url}{path}") as resp:
            return resp.status, await resp.json(content_type=None)

    async def pod_metric(self, metric: str, selector: str) -> dict[str, float]:
        """What an HPA gets for a Pods metric: pod name → value, from the custom metrics API (empty on 404)."""
        status, body = await self.get(
            f"{CUSTOM}/namespaces/{self.namespace}/pods/%2A/{metric}?labelSelector={selector.replace('=', '%3D')}"
        )
        if status != 200:
            return {}
        return {item["describedObject"]["name"]: float(parse_quantity(item["value"])) for item in body["items"]}

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._exit.close()
        if self._kubelet is not None:
            self._kubelet.stop()
        await self.kube.stop()
