"""The JSON objects of metrics.k8s.io, as metrics-server and prometheus-adapter marshal them: the same at v1 and v1beta1
(v1 renames v1beta1, field for field), but for ``apiVersion``.

A single object carries ``kind`` and ``apiVersion``; the items of a list do not (the list does). ``metadata`` holds
the object's name, namespace and labels, and a ``creationTimestamp`` of the moment of the answer (the metrics are
made then); ``window`` is a Go duration string (``5m0s``); usage is ``{"cpu": ..., "memory": ...}`` in Kubernetes
quantities."""

from __future__ import annotations

import time
from collections.abc import Iterable
from decimal import Decimal
from typing import Literal, NamedTuple, NotRequired, TypedDict

from adapter.api.objects import APIResourceList, ListMeta, timestamp
from adapter.api.paths import RESOURCE_GROUP
from adapter.backends.kube_api import ObjectMeta
from adapter.query.quantity import binary_quantity, format_quantity


# what the provider measured, per object; the functions below write it as the API does
class Usage(NamedTuple):
    cpu: Decimal  # cores, at least 0
    memory: Decimal  # bytes, at least 0


class ContainerUsage(NamedTuple):
    name: str
    usage: Usage


class PodUsage(NamedTuple):
    meta: ObjectMeta
    timestamp: float
    containers: tuple[ContainerUsage, ...]


class NodeUsage(NamedTuple):
    meta: ObjectMeta
    timestamp: float
    usage: Usage


class ResourceList(TypedDict):
    cpu: str
    memory: str


class Metadata(TypedDict):
    name: str
    namespace: NotRequired[str]
    creationTimestamp: str
    labels: NotRequired[dict[str, str]]


class ContainerMetrics(TypedDict):
    name: str
    usage: ResourceList


class NodeMetrics(TypedDict):
    kind: NotRequired[Literal["NodeMetrics"]]
    apiVersion: NotRequired[str]
    metadata: Metadata
    timestamp: str
    window: str
    usage: ResourceList


class PodMetrics(TypedDict):
    kind: NotRequired[Literal["PodMetrics"]]
    apiVersion: NotRequired[str]
    metadata: Metadata
    timestamp: str
    window: str
    containers: list[ContainerMetrics]


class NodeMetricsList(TypedDict):
    kind: Literal["NodeMetricsList"]
    apiVersion: str
    metadata: ListMeta
    items: list[NodeMetrics]


class PodMetricsList(TypedDict):
    kind: Literal["PodMetricsList"]
    apiVersion: str
    metadata: ListMeta
    items: list[PodMetrics]


def _metadata(meta: ObjectMeta, now: float) -> Metadata:
    out: Metadata
    if meta.namespace is None:
        out = {"name": meta.name, "creationTimestamp": timestamp(now)}
    else:
        out = {"name": meta.name, "namespace": meta.namespace, "creationTimestamp": timestamp(now)}
    if meta.labels:
        out["labels"] = dict(meta.labels)
    return out


def _usage(usage: Usage) -> ResourceList:
    return {"cpu": format_quantity(usage.cpu), "memory": binary_quantity(usage.memory)}


def node_metrics(node: NodeUsage, window: str, now: float) -> NodeMetrics:
    return {
        "metadata": _metadata(node.meta, now),
        "timestamp": timestamp(node.timestamp),
        "window": window,
        "usage": _usage(node.usage),
    }


def pod_metrics(pod: PodUsage, window: str, now: float) -> PodMetrics:
    return {
        "metadata": _metadata(pod.meta, now),
        "timestamp": timestamp(pod.timestamp),
        "window": window,
        "containers": [{"name": c.name, "usage": _usage(c.usage)} for c in pod.containers],
    }


def api_version(version: str) -> str:
    return f"{RESOURCE_GROUP}/{version}"


def node_metrics_list(nodes: Iterable[NodeUsage], window: str, version: str) -> NodeMetricsList:
    now = time.time()
    items = [node_metrics(n, window, now) for n in nodes]
    return {"kind": "NodeMetricsList", "apiVersion": api_version(version), "metadata": {}, "items": items}


def pod_metrics_list(pods: Iterable[PodUsage], window: str, version: str) -> PodMetricsList:
    now = time.time()
    items = [pod_metrics(p, window, now) for p in pods]
    return {"kind": "PodMetricsList", "apiVersion": api_version(version), "metadata": {}, "items": items}


def one_node(node: NodeUsage, window: str, version: str) -> NodeMetrics:
    return {"kind": "NodeMetrics", "apiVersion": api_version(version), **node_metrics(node, window, time.time())}


def one_pod(pod: PodUsage, window: str, version: str) -> PodMetrics:
    return {"kind": "PodMetrics", "apiVersion": api_version(version), **pod_metrics(pod, window, time.time())}


def resource_list(version: str) -> APIResourceList:
    """``/apis/metrics.k8s.io/{version}``: nodes and pods, read with get and list (metrics-server's list)."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": api_version(version),
        "resources": [
            {"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics", "verbs": ["get", "list"]},
            {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics", "verbs": ["get", "list"]},
        ],
    }
