"""Object metadata from the Kubernetes API: LIST and WATCH behind the small ``KubeMetadataAPI`` protocol.

The production implementation uses kubernetes_asyncio for configuration (kubeconfig or in-cluster), authentication and
TLS, and asks the API server for metadata only (``PartialObjectMetadata``): names and labels are all the adapter
needs, and full pod objects would cost ten to a hundred times the bytes. Servers that ignore that ``Accept`` value send
full objects, which parse the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from adapter.backends.kube_client import KubeClient, status_reason
from adapter.errors import KubernetesError
from adapter.naming.resources import ResourceInfo

log = logging.getLogger(__name__)

LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
WATCH_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
PAGE_SIZE = 500
REQUEST_SECONDS = 15.0  # one page of a LIST


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    name: str
    namespace: str | None
    labels: Mapping[str, str]


@dataclass(frozen=True)
class ObjectList:
    items: list[ObjectMeta]
    resource_version: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str
    object: ObjectMeta | None
    resource_version: str


class KubeMetadataAPI(Protocol):
    async def list(self, resource: ResourceInfo, namespace: str | None = None, label_selector: str = "") -> ObjectList:
        """Every object (of ``namespace``, matching ``label_selector``), and the list's resourceVersion."""
        ...

    def watch(self, resource: ResourceInfo, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        """Changes after ``resource_version``; raises ``ResourceExpired`` when that version is gone (410)."""
        ...

    async def close(self) -> None: ...


def parse_object(obj: Mapping[str, Any]) -> tuple[ObjectMeta, str]:
    """An object's metadata, checked: a name that is not a string, labels that are not a string map, fail."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise KubernetesError("an object without metadata.name")
    labels = meta.get("labels") or {}
    namespace = meta.get("namespace")
    if not isinstance(labels, dict) or not (namespace is None or isinstance(namespace, str)):
        raise KubernetesError(f"object {meta['name']}: labels or namespace of the wrong type")
    labels = {str(k): str(v) for k, v in labels.items()}
    return ObjectMeta(meta["name"], namespace, labels), str(meta.get("resourceVersion", ""))


def parse_event(event: Mapping[str, Any]) -> WatchEvent:
    """One decoded watch event of object metadata."""
    kind, obj = event["type"], event["object"]
    if kind == "BOOKMARK":
        return WatchEvent(kind, None, str((obj.get("metadata") or {}).get("resourceVersion", "")))
    meta, rv = parse_object(obj)
    return WatchEvent(str(kind), meta, rv)


class KubernetesMetadataAPI:
    """``KubeMetadataAPI`` over the adapter's Kubernetes client."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    @classmethod
    async def connect(cls, kubeconfig: Path | None) -> KubernetesMetadataAPI:
        """From a kubeconfig file, or the pod's service account when ``kubeconfig`` is None."""
        return cls(await KubeClient.connect(kubeconfig, REQUEST_SECONDS))

    async def close(self) -> None:
        await self.client.close()

    async def list(self, resource: ResourceInfo, namespace: str | None = None, label_selector: str = "") -> ObjectList:
        path = resource.path(namespace)
        items: list[ObjectMeta] = []
        token = ""
        while True:
            params = [("limit", str(PAGE_SIZE))]
            if label_selector:
                params.append(("labelSelector", label_selector))
            if token:
                params.append(("continue", token))
            try:
                status, body = await self.client.send("GET", path, params, accept=LIST_ACCEPT)
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                raise KubernetesError(f"LIST {path}: {e or type(e).__name__}") from e
            if status == 410 and token:
                log.info("LIST %s: continue token expired; listing again from the start", path)
                items, token = [], ""
                continue
            if status != 200:
                raise KubernetesError(f"LIST {path} answered {status_reason(status, body)}")
            page = _object(body, f"LIST {path}")
            for obj in page.get("items") or []:
                items.append(parse_object(obj)[0])
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                return ObjectList(items, str(meta.get("resourceVersion", "")))

    async def watch(
        self, resource: ResourceInfo, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[WatchEvent]:
        path = resource.list_path
        events = self.client.watch(path, [], f"WATCH {path}", resource_version, timeout_seconds, WATCH_ACCEPT)
        async for event in events:
            yield parse_event(event)


def _object(body: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise KubernetesError(f"{what}: the answer is not a JSON object")
    return value
