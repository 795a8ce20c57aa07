"""metrics.k8s.io objects as a ``meta.k8s.io`` Table, what ``kubectl get pods.metrics.k8s.io`` asks for (Accept
``application/json;as=Table;v=v1;g=meta.k8s.io``) and prints: metrics-server's columns, Name, cpu, memory and Window,
a pod's usage summed over its containers. Without the Table kubectl prints only each object's name and age.

Each row carries its object as the request's ``includeObject`` says, as the API server's Table conversion does:
``Metadata`` (the default) a PartialObjectMetadata, ``Object`` the whole object, ``None`` nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from adapter.api import resource_objects as objects
from adapter.api.resource_objects import NodeUsage, PodUsage, Usage
from adapter.errors import BadRequest
from adapter.query.quantity import binary_quantity, format_quantity

TABLE_VERSIONS = ("v1", "v1beta1")  # of meta.k8s.io
INCLUDE_OBJECT = ("Metadata", "Object", "None")
_COLUMNS = [
    {"name": "Name", "type": "string", "format": "name", "description": "Name of the resource", "priority": 0},
    {"name": "cpu", "type": "string", "format": "quantity", "description": "", "priority": 0},
    {"name": "memory", "type": "string", "format": "quantity", "description": "", "priority": 0},
    {"name": "Window", "type": "string", "format": "duration", "description": "", "priority": 0},
]


def table_version(accept: str) -> str | None:
    """The meta.k8s.io version of the Table ``accept`` asks for before anything else it takes, or None: the object
    as it is (a plain JSON, a wildcard, or no Accept at all)."""
    for media_range in accept.split(","):
        kind, *parameters = (part.strip() for part in media_range.split(";"))
        params = dict(p.partition("=")[::2] for p in parameters)
        if params.get("q", "1").strip() in ("0", "0.0", "0.00", "0.000"):
            continue
        if kind.lower() not in ("application/json", "application/*", "*/*"):
            continue
        if "as" not in params:
            return None
        if params["as"] == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in TABLE_VERSIONS:
            return params["v"]
    return None


def include_object(query: Mapping[str, str]) -> str:
    value = query.get("includeObject", "Metadata") or "Metadata"
    if value not in INCLUDE_OBJECT:
        raise BadRequest(f"includeObject {value!r}: must be one of {', '.join(INCLUDE_OBJECT)}")
    return value


def pods_table(pods: Iterable[PodUsage], window: str, version: str, table: str, include: str) -> dict[str, Any]:
    rows = []
    for pod in pods:
        total = Usage(sum((c.usage.cpu for c in pod.containers), Decimal(0)),
                      sum((c.usage.memory for c in pod.containers), Decimal(0)))  # fmt: skip
        rows.append(_row(pod.meta.name, total, window, objects.one_pod(pod, window, version), table, include))
    return _table(rows, table)


def nodes_table(nodes: Iterable[NodeUsage], window: str, version: str, table: str, include: str) -> dict[str, Any]:
    rows = [_row(n.meta.name, n.usage, window, objects.one_node(n, window, version), table, include) for n in nodes]
    return _table(rows, table)


def _row(name: str, usage: Usage, window: str, obj: Mapping[str, Any], table: str, include: str) -> dict[str, Any]:
    row: dict[str, Any] = {"cells": [name, format_quantity(usage.cpu), binary_quantity(usage.memory), window]}
    if include == "Object":
        row["object"] = dict(obj)
    elif include == "Metadata":
        meta = {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{table}", "metadata": obj["metadata"]}
        row["object"] = meta
    return row


def _table(rows: list[dict[str, Any]], table: str) -> dict[str, Any]:
    return {"kind": "Table", "apiVersion": f"meta.k8s.io/{table}", "metadata": {}, "columnDefinitions": _COLUMNS,
            "rows": rows}  # fmt: skip
