"""Pod UID → namespace and name for the pods on this node, from a LIST and WATCH of the Kubernetes API.

Only shared GPUs need it: a process's cgroup names its pod by UID, and the kubelet's pod-resources API names pods by
namespace and name. The watch runs as a task on the server's event loop; ``lookup`` is a dict read, safe from the
collection thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import Counter
from typing import Any, Protocol

log = logging.getLogger(__name__)

_WATCH_SECONDS = 300
_MAX_BACKOFF = 30.0


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
        """List, then watch until the watch ends or fails; again, forever (cancel to stop).

        Pods are read as plain JSON, not as typed models: only uid, namespace and name are needed, and the typed
        models cost CPU on every event and reject objects they consider incomplete.
        """
        from kubernetes_asyncio import client, watch
        from kubernetes_asyncio.client.exceptions import ApiException

        backoff = 1.0
        selector = f"spec.nodeName={self._node}"
        configured = False
        while True:
            try:
                if not configured:
                    await self._load_config()
                    configured = True
                async with client.ApiClient() as api_client:
                    api = client.CoreV1Api(api_client)
                    response = await api.list_pod_for_all_namespaces(field_selector=selector, _preload_content=False)
                    listed = json.loads(await response.read())  # type: ignore[attr-defined]
                    self._pods = dict(filter(None, (_entry(p) for p in listed.get("items") or [])))
                    if not self.synced:
                        log.info("pod directory synced: %d pod(s) on node %s", len(self._pods), self._node)
                    self.synced = True
                    backoff = 1.0
                    async with watch.Watch(return_type="object") as w:
                        stream = w.stream(
                            api.list_pod_for_all_namespaces,
                            field_selector=selector,
                            resource_version=listed["metadata"]["resourceVersion"],
                            timeout_seconds=_WATCH_SECONDS,
                        )
                        async for event in stream:
                            self._apply(event["type"], event["raw_object"])
                continue
            except asyncio.CancelledError:
                raise
            except ApiException as e:
                if e.status == 410:  # our resourceVersion was compacted away: list again at once
                    self.errors["Expired"] += 1
                    continue
                self._failed(f"HTTP{e.status}", f"{e.status} {e.reason}")
            except Exception as e:  # config, network, TLS, a malformed answer: try again later, never die
                self._failed(type(e).__name__, str(e) or repr(e))
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF)

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
