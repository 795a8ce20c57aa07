"""Pod UID → namespace and name for the pods on this node, from a LIST and WATCH of the Kubernetes API.

Only shared GPUs need it: a process's cgroup names its pod by UID, and the kubelet's pod-resources API names pods by
namespace and name. The watch runs as a task on the server's event loop; ``lookup`` is a dict read, safe from the
collection thread.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, Protocol

from common.list_watch import Restart, list_watch

log = logging.getLogger(__name__)

_WATCH_SECONDS = 300


class PodDirectory(Protocol):
    @property
    def synced(self) -> bool: ...

    def lookup(self, uid: str) -> tuple[str, str] | None:
        """(namespace, name) of the pod with this UID, or None when no such pod runs on this node."""
        ...


class KubePodDirectory:
    def __init__(self, node_name: str, kubeconfig: str | None = None) -> None:
        self._node = node_name
        self._kubeconfig = kubeconfig
        self._pods: dict[str, tuple[str, str]] = {}
        self.synced = False
        self.errors: Counter[str] = Counter()

    def lookup(self, uid: str) -> tuple[str, str] | None:
        return self._pods.get(uid)

    async def _load_config(self) -> None:
        from kubernetes_asyncio import config

        if self._kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(config_file=self._kubeconfig or os.environ.get("KUBECONFIG"))

    async def run(self) -> None:
        """List, then watch, forever (``common/list_watch.py``; cancel to stop).

        Pods are read as plain JSON, not as typed models: only uid, namespace and name are needed, and the typed
        models cost CPU on every event and reject objects they consider incomplete.
        """
        from kubernetes_asyncio import client, watch
        from kubernetes_asyncio.client.exceptions import ApiException

        selector = f"spec.nodeName={self._node}"
        api_client: Any = None

        async def list_pods() -> str:
            nonlocal api_client
            if api_client is None:
                await self._load_config()
                api_client = client.ApiClient()
            api = client.CoreV1Api(api_client)
            response = await api.list_pod_for_all_namespaces(field_selector=selector, _preload_content=False)
            listed = json.loads(await response.read())  # type: ignore[attr-defined]
            self._pods = dict(filter(None, (_entry(p) for p in listed.get("items") or [])))
            if not self.synced:
                log.info("pod directory synced: %d pod(s) on node %s", len(self._pods), self._node)
            self.synced = True
            return str(listed["metadata"]["resourceVersion"])

        async def watch_pods(version: str) -> AsyncIterator[str]:
            async with watch.Watch(return_type="object") as w:
                stream = w.stream(
                    client.CoreV1Api(api_client).list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=version,
                    timeout_seconds=_WATCH_SECONDS,
                )
                async for event in stream:
                    pod = event["raw_object"]
                    self._apply(event["type"], pod)
                    yield str((pod.get("metadata") or {}).get("resourceVersion") or "")

        def restarted(why: Restart, error: BaseException | None) -> None:
            if why == "expired":  # our resourceVersion was compacted away: listed again at once
                self.errors["Expired"] += 1
            elif isinstance(error, ApiException):
                self._failed(f"HTTP{error.status}", f"{error.status} {error.reason}")
            elif error is not None:  # config, network, TLS, a malformed answer: tried again later, never fatal
                self._failed(type(error).__name__, str(error) or repr(error))

        try:
            await list_watch(
                list_pods, watch_pods, lambda e: isinstance(e, ApiException) and e.status == 410, restarted
            )
        finally:
            if api_client is not None:
                await api_client.close()

    def _apply(self, kind: str, pod: dict[str, Any]) -> None:
        entry = _entry(pod)
        if entry is None:
            return
        if kind == "DELETED":
            self._pods.pop(entry[0], None)
        elif kind in ("ADDED", "MODIFIED"):
            self._pods[entry[0]] = entry[1]

    def _failed(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        log.warning(
            "pod directory: Kubernetes API failed (%s: %s); shared-GPU pods cannot be named until it answers",
            kind,
            detail,
        )


def _entry(pod: dict[str, Any]) -> tuple[str, tuple[str, str]] | None:
    meta = pod.get("metadata") or {}
    uid, namespace, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
    if not (uid and namespace and name):
        return None
    return uid, (namespace, name)
