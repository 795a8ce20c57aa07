"""Object metadata from the Kubernetes API: LIST and WATCH behind the small ``KubeMetadataAPI`` protocol.

The production implementation uses kubernetes_asyncio for configuration (kubeconfig or in-cluster), authentication and
TLS, and asks the API server for metadata only (``PartialObjectMetadata``): names and labels are all the adapter
needs, and full pod objects would cost ten to a hundred times the bytes. Servers that ignore that ``Accept`` value send
full objects, which parse the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from adapter.errors import KubernetesError, ResourceExpired
from adapter.naming.resources import ResourceInfo

log = logging.getLogger(__name__)

LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
WATCH_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
PAGE_SIZE = 500


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


def parse_object(obj: Any) -> tuple[ObjectMeta, str]:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return ObjectMeta(str(meta["name"]), meta.get("namespace"), {str(k): str(v) for k, v in labels.items()}), str(
        meta.get("resourceVersion", "")
    )


def status_reason(status: int, body: bytes) -> str:
    """ "HTTP 403 Forbidden": the code and the Status ``reason``, never its message (which may quote the request)."""
    try:
        reason = json.loads(body).get("reason") or ""
    except (ValueError, AttributeError):
        reason = ""
    return f"HTTP {status}" + (f" {reason}" if reason else "")


async def watch_stream(
    open_stream: Callable[[], Awaitable[Any]], what: str, resource_version: str
) -> AsyncIterator[dict[str, Any]]:
    """The events of one watch response, decoded; 410 (as the answer or as an ERROR event) raises
    ``ResourceExpired``, any other failure ``KubernetesError`` naming ``what`` with the code and reason only."""
    try:
        resp = await open_stream()
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise KubernetesError(f"{what}: {e}") from e
    try:
        if resp.status == 410:
            raise ResourceExpired(f"{what} from {resource_version}: 410 Gone")
        if resp.status != 200:
            raise KubernetesError(f"{what} answered {status_reason(resp.status, await resp.read())}")
        async for line in resp.content:
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("type") == "ERROR":  # as client-go's reflector treats them
                obj = event.get("object") or {}
                message = f"{what}: error {obj.get('code')} {obj.get('reason', '')}"
                raise ResourceExpired(message) if obj.get("code") == 410 else KubernetesError(message)
            yield event
    except (aiohttp.ClientError, TimeoutError) as e:
        raise KubernetesError(f"{what}: {e}") from e
    finally:
        resp.release()


def parse_event(event: Mapping[str, Any]) -> WatchEvent:
    """One decoded watch event (``watch_stream``) of object metadata."""
    kind, obj = event.get("type"), event.get("object") or {}
    if kind == "BOOKMARK":
        return WatchEvent(kind, None, str((obj.get("metadata") or {}).get("resourceVersion", "")))
    meta, rv = parse_object(obj)
    return WatchEvent(str(kind), meta, rv)


async def new_api_client(kubeconfig: Path | None) -> Any:
    """A kubernetes_asyncio ``ApiClient`` from a kubeconfig file, or the pod's service account when None."""
    from kubernetes_asyncio import client, config

    try:
        if kubeconfig is not None:
            return await config.new_client_from_config(config_file=str(kubeconfig))
        configuration = client.Configuration()
        load_incluster: Any = config.load_incluster_config
        load_incluster(client_configuration=configuration)
        return client.ApiClient(configuration)
    except (config.ConfigException, OSError, ValueError, KeyError) as e:
        raise KubernetesError(f"cannot configure the Kubernetes client: {e}") from e


class KubernetesMetadataAPI:
    """``KubeMetadataAPI`` over kubernetes_asyncio's configured ``ApiClient``."""

    def __init__(self, api_client: Any, request_timeout: float = 15.0) -> None:
        self.api_client = api_client
        self.request_timeout = request_timeout

    @classmethod
    async def connect(cls, kubeconfig: Path | None) -> KubernetesMetadataAPI:
        """From a kubeconfig file, or the pod's service account when ``kubeconfig`` is None."""
        return cls(await new_api_client(kubeconfig))

    async def close(self) -> None:
        await self.api_client.close()

    async def _get(self, path: str, params: list[tuple[str, str]], accept: str, limit: Any) -> Any:
        try:
            return await self.api_client.call_api(
                path,
                "GET",
                query_params=params,
                header_params={"Accept": accept},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=limit,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise KubernetesError(f"GET {path}: {e}") from e

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
            resp = await self._get(path, params, LIST_ACCEPT, self.request_timeout)
            try:
                body = await resp.read()
            except (aiohttp.ClientError, TimeoutError) as e:
                raise KubernetesError(f"LIST {path}: {e}") from e
            finally:
                resp.release()
            if resp.status == 410 and token:
                log.info("LIST %s: continue token expired; listing again from the start", path)
                items, token = [], ""
                continue
            if resp.status != 200:
                raise KubernetesError(f"LIST {path} answered HTTP {resp.status}: {body[:300]!r}")
            page = json.loads(body)
            items.extend(parse_object(obj)[0] for obj in page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                return ObjectList(items, str(meta.get("resourceVersion", "")))

    async def watch(
        self, resource: ResourceInfo, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[WatchEvent]:
        params = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.request_timeout, sock_read=timeout_seconds + 30)
        events = watch_stream(
            lambda: self._get(resource.list_path, params, WATCH_ACCEPT, timeout),
            f"WATCH {resource.list_path}",
            resource_version,
        )
        async for event in events:
            yield parse_event(event)
