"""The API server's resources, read from its discovery documents as client-go's discovery client reads them.

Aggregated discovery first (Kubernetes 1.26+): ``/api`` and ``/apis`` asked with the ``APIGroupDiscoveryList``
media types (``v2`` from 1.30, ``v2beta1`` before) answer every group, version and resource in two requests. A
server that does not offer it answers the legacy documents to the same requests (``APIVersions``,
``APIGroupList``), and then each group version's ``APIResourceList`` is read. Which one came back is told by the
answer's ``kind``.

A group version that cannot be read (an aggregated API server that is down: HTTP 503 in legacy discovery, or
``freshness: Stale`` in aggregated discovery, which client-go skips too) is reported in ``failed``; the rest is
used. Subresources (``pods/status``) are left out: metrics describe objects.

The order is client-go's priority: the core group, then each group's preferred version in the order ``/apis`` lists
the groups, then the other versions; the first resource of a name wins when a name is asked without its group.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

import aiohttp

from adapter.backends.kube_client import KubeClient, status_reason
from adapter.errors import KubernetesError
from adapter.naming.resources import GroupResource, ResourceInfo

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList"
ACCEPT = ",".join([AGGREGATED.format("v2"), AGGREGATED.format("v2beta1"), "application/json"])
PARALLEL_REQUESTS = 8


class GroupVersionKind(TypedDict, total=False):
    group: str
    version: str
    kind: str


class APIResourceDiscovery(TypedDict, total=False):
    """apidiscovery.k8s.io/v2 (fields read here)."""

    resource: str
    responseKind: GroupVersionKind
    scope: str  # Namespaced or Cluster
    singularResource: str


class APIVersionDiscovery(TypedDict, total=False):
    version: str
    resources: list[APIResourceDiscovery]
    freshness: str  # Current or Stale


class APIResource(TypedDict, total=False):
    """meta/v1 APIResource, an entry of a legacy APIResourceList."""

    name: str
    singularName: str
    namespaced: bool
    kind: str


@dataclass(frozen=True)
class Discovered:
    """Resources in priority order; the group versions that could not be read, with why; which discovery answered."""

    resources: tuple[ResourceInfo, ...]
    failed: dict[tuple[str, str], str] = field(default_factory=dict)
    aggregated: bool = False


class ResourceDiscoveryAPI(Protocol):
    async def discover(self) -> Discovered:
        """Every resource the API server serves; ``KubernetesError`` when ``/api`` or ``/apis`` cannot be read."""
        ...


class _Malformed(ValueError):
    """A discovery document of the wrong shape; the message says where."""


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Malformed(f"{where} is not a list")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _Malformed(f"{where} is not a string")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Malformed(f"{where} is not an object")
    return value


def _info(group: str, version: str, name: str, singular: str, kind: str, namespaced: bool) -> ResourceInfo:
    # servers that list no singular name (older built-ins) get client-go's guess: the kind in lower case
    return ResourceInfo(GroupResource(name, group), singular or kind.lower(), kind, version, namespaced)


def aggregated_resources(
    document: dict[str, Any], failed: dict[tuple[str, str], str]
) -> Iterator[tuple[str, bool, list[ResourceInfo]]]:
    """An ``APIGroupDiscoveryList``'s resources: (group, preferred version?, resources) per group version."""
    for i, item in enumerate(_list(document.get("items"), "items")):
        where = f"items[{i}]"
        metadata = _object(_object(item, where).get("metadata") or {}, f"{where}.metadata")
        group = _text(metadata.get("name", ""), f"{where}.metadata.name")  # "" (or none): the core group
        for j, raw in enumerate(_list(item.get("versions"), f"{where}.versions")):
            version: APIVersionDiscovery = _object(raw, f"{where}.versions[{j}]")  # type: ignore[assignment]
            name = _text(version.get("version"), f"{where}.versions[{j}].version")
            if version.get("freshness") == "Stale":
                failed[(group, name)] = "its discovery document is stale (the server behind it does not answer)"
                continue
            infos = []
            for k, entry in enumerate(_list(version.get("resources"), f"{where}.versions[{j}].resources")):
                resource: APIResourceDiscovery = _object(entry, f"{where}.versions[{j}].resources[{k}]")  # type: ignore[assignment]
                plural = _text(resource.get("resource"), f"{where}.versions[{j}].resources[{k}].resource")
                kind = (resource.get("responseKind") or {}).get("kind") or ""
                if "/" in plural or not kind:  # no kind: an entry that only carries subresources
                    continue
                namespaced = resource.get("scope") == "Namespaced"
                infos.append(_info(group, name, plural, resource.get("singularResource") or "", kind, namespaced))
            yield group, j == 0, infos


def legacy_resources(group: str, version: str, document: dict[str, Any]) -> list[ResourceInfo]:
    """An ``APIResourceList``'s resources."""
    infos = []
    for i, entry in enumerate(_list(document.get("resources"), "resources")):
        resource: APIResource = _object(entry, f"resources[{i}]")  # type: ignore[assignment]
        name = _text(resource.get("name"), f"resources[{i}].name")
        if "/" in name:
            continue
        kind = _text(resource.get("kind"), f"resources[{i}].kind")
        singular, namespaced = resource.get("singularName") or "", bool(resource.get("namespaced"))
        infos.append(_info(group, version, name, singular, kind, namespaced))
    return infos


def legacy_group_versions(core: dict[str, Any], groups: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(group, version, preferred?) of an ``APIVersions`` and an ``APIGroupList``, preferred versions first."""
    found = [("", _text(v, "versions[]"), i == 0) for i, v in enumerate(_list(core.get("versions"), "versions"))]
    for i, raw in enumerate(_list(groups.get("groups"), "groups")):
        group = _object(raw, f"groups[{i}]")
        name = _text(group.get("name"), f"groups[{i}].name")
        versions = [
            _text(_object(v, f"groups[{i}].versions[]").get("version"), f"groups[{i}].versions[].version")
            for v in _list(group.get("versions"), f"groups[{i}].versions")
        ]
        preferred = (group.get("preferredVersion") or {}).get("version") or (versions[0] if versions else "")
        found += [(name, v, v == preferred) for v in sorted(versions, key=lambda v: v != preferred)]
    return found


def in_priority_order(per_version: list[tuple[str, bool, list[ResourceInfo]]]) -> tuple[ResourceInfo, ...]:
    """The core group first, then every group's preferred version, then the other versions (client-go's order)."""
    core = [info for group, _, infos in per_version if not group for info in infos]
    preferred = [info for group, first, infos in per_version if group and first for info in infos]
    others = [info for group, first, infos in per_version if group and not first for info in infos]
    return tuple(core + preferred + others)


class ApiDiscovery:
    """``ResourceDiscoveryAPI`` over the adapter's Kubernetes client."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def _get(self, path: str, accept: str = "application/json") -> dict[str, Any]:
        try:
            status, body = await self.client.send("GET", path, [], accept=accept)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise KubernetesError(f"GET {path}: {e or type(e).__name__}") from e
        if status != 200:
            raise KubernetesError(f"GET {path} answered {status_reason(status, body)}")
        try:
            return _object(json.loads(body), "the answer")
        except (ValueError, _Malformed) as e:
            raise KubernetesError(f"GET {path}: not a discovery document ({e})") from e

    async def discover(self) -> Discovered:
        core, groups = await asyncio.gather(self._get("/api", ACCEPT), self._get("/apis", ACCEPT))
        failed: dict[tuple[str, str], str] = {}
        try:
            if core.get("kind") == "APIGroupDiscoveryList" and groups.get("kind") == "APIGroupDiscoveryList":
                per_version = [*aggregated_resources(core, failed), *aggregated_resources(groups, failed)]
                return Discovered(in_priority_order(per_version), failed, aggregated=True)
            versions = legacy_group_versions(core, groups)
        except _Malformed as e:
            raise KubernetesError(f"discovery: /api or /apis is not a discovery document: {e}") from e
        semaphore = asyncio.Semaphore(PARALLEL_REQUESTS)

        async def one(group: str, version: str, preferred: bool) -> tuple[str, bool, list[ResourceInfo]]:
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            try:
                async with semaphore:
                    document = await self._get(path)
                return group, preferred, legacy_resources(group, version, document)
            except (KubernetesError, _Malformed) as e:
                failed[(group, version)] = str(e)
                return group, preferred, []

        per_version = await asyncio.gather(*(one(*gv) for gv in versions))
        return Discovered(in_priority_order(list(per_version)), failed)
