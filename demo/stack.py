"""The whole chain on 127.0.0.1: collector → Prometheus (1 s scrape) → adapter → custom metrics API.

Kubernetes itself cannot run here, so two stand-ins take its place: an API server that lists and watches pod
metadata (for the adapter's selectors and the collector's pod directory) and the kubelet's pod-resources socket
(which pod holds which GPU). Everything else is the real program: the collector with its pod mapping, a real
Prometheus, the adapter as a separate process answering the same URLs the HPA asks. Prometheus also scrapes the
``scrape_jobs`` it is given (the demo's inference engines and the gateway in front of them).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from harness.kube.api import FakeKubeAPIServer
from harness.kube.wire import parse_quantity
from harness.node.kubelet import FakePod, PodResourcesServer
from harness.parent_death import guarded
from harness.processes import free_port
from harness.stores.prometheus import Prometheus, run_prometheus

ROOT = Path(__file__).resolve().parents[1]
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"


@dataclass(frozen=True)
class Pod:
    name: str
    labels: dict[str, str]
    device_ids: tuple[str, ...]  # what the device plugin gave it: GPU UUIDs, UUID::n replicas, MIG-<uuid>
    resource: str = "nvidia.com/gpu"
    uid: str = ""
    namespace: str = ""  # "": the stack's own


@dataclass
class Stack:
    workdir: Path
    collector_args: Sequence[str] = ()
    namespace: str = "ml"
    node: str = "demo-node"
    adapter_args: Sequence[str] = ()
    namespaces: Sequence[str] = ()  # besides ``namespace``
    scrape_jobs: Sequence[dict[str, Any]] = ()  # more of Prometheus's scrape_configs
    kube: FakeKubeAPIServer = field(default_factory=FakeKubeAPIServer)
    collector_url: str = ""
    adapter_url: str = ""
    prometheus: Prometheus | None = None
    _kubelet: PodResourcesServer | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _exit: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _session: aiohttp.ClientSession | None = None
    _owned: dict[str, list[Pod]] = field(default_factory=dict)

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
        for namespace in (self.namespace, *self.namespaces):
            self.kube.put("namespaces", namespace, {"kubernetes.io/metadata.name": namespace})
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
            run_prometheus(
                self.workdir / "prometheus",
                [f"127.0.0.1:{collector_port}"],
                scrape_interval="1s",
                extra_jobs=list(self.scrape_jobs),
                die_with_parent=True,
            )
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
        # killed with the demo even by a SIGKILL: called from the event loop's thread, which lives as long as it
        process = subprocess.Popen(
            guarded([sys.executable, *args]), cwd=ROOT, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT
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
        """Make these the pods on the node: in the API server's list and watch, and, those that hold a device, in the
        kubelet's answer."""
        assert self._kubelet is not None
        current = set(self.kube.objects.get("pods", {}))
        wanted = {(p.namespace or self.namespace, p.name): p for p in pods}
        for (namespace, name), pod in wanted.items():
            self.kube.put("pods", name, pod.labels, namespace=namespace, uid=pod.uid or f"uid-{name}",
                          spec={"nodeName": self.node})  # fmt: skip
        for gone_namespace, gone in current - set(wanted):
            self.kube.delete("pods", gone, namespace=gone_namespace)
        self._kubelet.pods = [
            FakePod(namespace, p.name, {"main": [(p.resource, list(p.device_ids))]})
            for (namespace, _), p in wanted.items()
            if p.device_ids
        ]

    def pods_of(self, owner: str) -> Callable[[list[Pod]], None]:
        """What ``owner`` (a Deployment, or the pods beside them) calls with its pods: the node gets them and keeps
        every other owner's."""

        def apply(pods: list[Pod]) -> None:
            self._owned[owner] = list(pods)
            self.set_pods([p for owned in self._owned.values() for p in owned])

        return apply

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

    async def external_metric(self, namespace: str, metric: str) -> float | None:
        """The sum of an External metric's items for ``namespace``, as an HPA adds them (None without a value)."""
        status, body = await self.get(f"{EXTERNAL}/namespaces/{namespace}/{metric}")
        if status != 200 or not body.get("items"):
            return None
        return sum(float(parse_quantity(item["value"])) for item in body["items"])

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
