"""The JSON objects of the metrics APIs: every response carries ``kind`` and ``apiVersion``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

from adapter.api.paths import CUSTOM_GROUP, EXTERNAL_GROUP, VERSIONS


# values made once per item of an answer are NamedTuples: several times cheaper to make than frozen dataclasses
class ObjectRef(NamedTuple):
    kind: str
    namespace: str | None
    name: str
    api_version: str


class MetricValue(NamedTuple):
    described: ObjectRef
    metric: str
    selector: Mapping[str, object] | None
    timestamp: float
    window: int
    value: str


class MetricValues(list[MetricValue]):
    """One answer's values, with its JSON kept per API version: the provider hands back the same answer while
    nothing it depends on changed, so each answer is rendered once however often it is asked for."""

    def __init__(self, values: Iterable[MetricValue] = ()) -> None:
        super().__init__(values)
        self._bodies: dict[str, bytes] = {}

    def body(self, version: str) -> bytes:
        rendered = self._bodies.get(version)
        if rendered is None:
            rendered = self._bodies[version] = render_metric_value_list(version, self)
        return rendered


class ExternalValue(NamedTuple):
    metric: str
    labels: Mapping[str, str]
    timestamp: float
    value: str


@dataclass(frozen=True, slots=True, order=True)
class ResourceEntry:
    """One line of an APIResourceList: ``pods/gpu_utilization`` or an external metric name."""

    name: str
    namespaced: bool


# -- the wire objects, as the metrics APIs' Go types marshal them ----------------------------------------


class DescribedObject(TypedDict):
    kind: str
    namespace: NotRequired[str]
    name: str
    apiVersion: str


class MetricIdentifier(TypedDict):
    name: str
    selector: Mapping[str, object] | None


class MetricValueV1beta1(TypedDict):
    describedObject: DescribedObject
    metricName: str
    timestamp: str
    window: int
    value: str
    selector: Mapping[str, object] | None


class MetricValueV1beta2(TypedDict):
    describedObject: DescribedObject
    metric: MetricIdentifier
    timestamp: str
    windowSeconds: int
    value: str


class ListMeta(TypedDict):
    pass


class MetricValueList(TypedDict):
    kind: Literal["MetricValueList"]
    apiVersion: str
    metadata: ListMeta
    items: list[MetricValueV1beta1] | list[MetricValueV1beta2]


class ExternalMetricValue(TypedDict):
    metricName: str
    metricLabels: dict[str, str]
    timestamp: str
    value: str


class ExternalMetricValueList(TypedDict):
    kind: Literal["ExternalMetricValueList"]
    apiVersion: str
    metadata: ListMeta
    items: list[ExternalMetricValue]


class Status(TypedDict):
    kind: Literal["Status"]
    apiVersion: Literal["v1"]
    metadata: ListMeta
    status: Literal["Failure"]
    message: str
    reason: str
    code: int


class GroupVersion(TypedDict):
    groupVersion: str
    version: str


class APIGroupEntry(TypedDict):
    name: str
    versions: list[GroupVersion]
    preferredVersion: GroupVersion


class APIGroup(APIGroupEntry):
    kind: Literal["APIGroup"]
    apiVersion: Literal["v1"]


class APIGroupList(TypedDict):
    kind: Literal["APIGroupList"]
    apiVersion: Literal["v1"]
    groups: list[APIGroupEntry]


class APIResource(TypedDict):
    name: str
    singularName: str
    namespaced: bool
    kind: str
    verbs: list[str]


class APIResourceList(TypedDict):
    kind: Literal["APIResourceList"]
    apiVersion: Literal["v1"]
    groupVersion: str
    resources: list[APIResource]


def timestamp(seconds: float) -> str:
    """RFC 3339 in UTC to the second, as metav1.Time marshals."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _described(ref: ObjectRef) -> DescribedObject:
    # key order as the Go type marshals: kind, namespace, name, apiVersion
    if ref.namespace is not None:
        return {"kind": ref.kind, "namespace": ref.namespace, "name": ref.name, "apiVersion": ref.api_version}
    return {"kind": ref.kind, "name": ref.name, "apiVersion": ref.api_version}


def metric_value(version: str, v: MetricValue) -> MetricValueV1beta1 | MetricValueV1beta2:
    if version == "v1beta1":
        return {
            "describedObject": _described(v.described),
            "metricName": v.metric,
            "timestamp": timestamp(v.timestamp),
            "window": v.window,
            "value": v.value,
            "selector": v.selector,
        }
    return {
        "describedObject": _described(v.described),
        "metric": {"name": v.metric, "selector": v.selector},
        "timestamp": timestamp(v.timestamp),
        "windowSeconds": v.window,
        "value": v.value,
    }


def metric_value_list(version: str, values: Iterable[MetricValue]) -> MetricValueList:
    items: Any = [metric_value(version, v) for v in values]  # all of one version
    return {"kind": "MetricValueList", "apiVersion": f"{CUSTOM_GROUP}/{version}", "metadata": {}, "items": items}


def render_metric_value_list(version: str, values: Sequence[MetricValue]) -> bytes:
    """``metric_value_list`` as compact JSON, written directly: the items of an answer differ only in object name
    and value, so the rest of an item (its frame) is encoded once per answer instead of once per item."""
    frames: dict[tuple[object, ...], tuple[str, str, str]] = {}
    items = []
    for v in values:
        ref = v.described
        key = (ref.kind, ref.namespace, ref.api_version, v.metric, id(v.selector), v.timestamp, v.window)
        frame = frames.get(key)
        if frame is None:
            frame = frames[key] = _frame(version, v)
        items.append(f"{frame[0]}{_string(ref.name)}{frame[1]}{_string(v.value)}{frame[2]}")
    head = _dumps({"kind": "MetricValueList", "apiVersion": f"{CUSTOM_GROUP}/{version}", "metadata": {}})
    return f'{head[:-1]},"items":[{",".join(items)}]}}'.encode()


def _frame(version: str, v: MetricValue) -> tuple[str, str, str]:
    """An item's JSON before its object name, between name and value, and after the value, in the field order of
    ``metric_value`` (the Go types' order)."""
    ref = v.described
    namespace = "" if ref.namespace is None else f'"namespace":{_dumps(ref.namespace)},'
    before = f'{{"describedObject":{{"kind":{_dumps(ref.kind)},{namespace}"name":'
    described_end = f',"apiVersion":{_dumps(ref.api_version)}}}'
    when = _dumps(timestamp(v.timestamp))
    if version == "v1beta1":
        middle = f',"metricName":{_dumps(v.metric)},"timestamp":{when},"window":{v.window},"value":'
        return before, described_end + middle, f',"selector":{_dumps(v.selector)}}}'
    metric = _dumps({"name": v.metric, "selector": v.selector})
    return before, f'{described_end},"metric":{metric},"timestamp":{when},"windowSeconds":{v.window},"value":', "}"


def external_value_list(version: str, values: Iterable[ExternalValue]) -> ExternalMetricValueList:
    return {
        "kind": "ExternalMetricValueList",
        "apiVersion": f"{EXTERNAL_GROUP}/{version}",
        "metadata": {},
        "items": [
            {
                "metricName": v.metric,
                "metricLabels": dict(v.labels),
                "timestamp": timestamp(v.timestamp),
                "value": v.value,
            }
            for v in values
        ],
    }


_string = json.encoder.encode_basestring


def _dumps(body: Any) -> str:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def status(code: int, reason: str, message: str) -> Status:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _group_version(group: str, version: str) -> GroupVersion:
    return {"groupVersion": f"{group}/{version}", "version": version}


def api_group(group: str) -> APIGroup:
    versions = VERSIONS[group]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": [_group_version(group, v) for v in versions],
        "preferredVersion": _group_version(group, versions[0]),
    }


def api_group_list(groups: Sequence[str]) -> APIGroupList:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g) for g in groups]}


def _group(group: str) -> APIGroupEntry:
    body = api_group(group)
    return {"name": body["name"], "versions": body["versions"], "preferredVersion": body["preferredVersion"]}


def api_resource_list(group: str, version: str, entries: Iterable[ResourceEntry]) -> APIResourceList:
    kind = "ExternalMetricValueList" if group == EXTERNAL_GROUP else "MetricValueList"
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": [
            {"name": e.name, "singularName": "", "namespaced": e.namespaced, "kind": kind, "verbs": ["get"]}
            for e in entries
        ],
    }
