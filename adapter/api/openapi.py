"""OpenAPI documents of the served groups: ``/openapi/v2`` (Swagger 2.0) and ``/openapi/v3`` (an index of one
OpenAPI 3.0 document per group-version), which kube-apiserver's aggregator fetches and merges into the cluster's.

The schemas are the metrics APIs' own types under Kubernetes' definition names, so ``kubectl explain`` and clients
generated from the cluster's spec see the same types as for other metrics servers. The documents depend only on which
groups are served, so each is built once per set of groups.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from adapter.api.paths import CUSTOM_GROUP, EXTERNAL_GROUP, RESOURCE_GROUP, VERSIONS

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
OBJECT_REFERENCE = "io.k8s.api.core.v1.ObjectReference"
CUSTOM_DEFS = "io.k8s.metrics.pkg.apis.custom_metrics"
EXTERNAL_DEFS = "io.k8s.metrics.pkg.apis.external_metrics"
RESOURCE_DEFS = "io.k8s.metrics.pkg.apis.metrics"  # then the version: ...metrics.v1.NodeMetrics
_STR = {"type": "string"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/definitions/{name}"}


def _nullable(name: str) -> dict[str, Any]:
    # the selectors are answered as null when a request has none, as Kubernetes' own servers answer them
    return {**_ref(name), "x-nullable": True}


def _obj(description: str, properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"description": description, "type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def _list(item: str, description: str, group: str, version: str, kind: str) -> dict[str, Any]:
    schema = _obj(
        description,
        {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": _ref(f"{META}.ListMeta"),
            "items": {"type": "array", "items": _ref(item)},
        },
        ("items",),
    )
    schema["x-kubernetes-group-version-kind"] = [{"group": group, "kind": kind, "version": version}]
    return schema


def _common() -> dict[str, Any]:
    strings = {"type": "array", "items": _STR}
    return {
        QUANTITY: {"description": "A Kubernetes quantity: 95500m, 1k, 100u.", "type": "string"},
        f"{META}.Time": {"description": "RFC 3339 time, in UTC.", "type": "string", "format": "date-time"},
        f"{META}.ListMeta": _obj(
            "Metadata of a list.",
            {"continue": _STR, "remainingItemCount": {"type": "integer", "format": "int64"}, "resourceVersion": _STR},
        ),
        f"{META}.LabelSelectorRequirement": _obj(
            "One requirement of a label selector.",
            {"key": _STR, "operator": _STR, "values": strings},
            ("key", "operator"),
        ),
        f"{META}.LabelSelector": _obj(
            "A label selector.",
            {
                "matchExpressions": {"type": "array", "items": _ref(f"{META}.LabelSelectorRequirement")},
                "matchLabels": {"type": "object", "additionalProperties": _STR},
            },
        ),
        OBJECT_REFERENCE: _obj(
            "The object a metric describes.",
            {k: _STR for k in ("apiVersion", "fieldPath", "kind", "name", "namespace", "resourceVersion", "uid")},
        ),
        f"{META}.APIResource": _obj(
            "A resource of a group-version: a metric of an object resource (pods/gpu_utilization).",
            {"name": _STR, "singularName": _STR, "namespaced": {"type": "boolean"}, "kind": _STR, "verbs": strings},
            ("name", "singularName", "namespaced", "kind", "verbs"),
        ),
        f"{META}.APIResourceList": _obj(
            "The resources of a group-version.",
            {
                "apiVersion": _STR,
                "kind": _STR,
                "groupVersion": _STR,
                "resources": {"type": "array", "items": _ref(f"{META}.APIResource")},
            },
            ("groupVersion", "resources"),
        ),
        f"{META}.Status": _obj(
            "An error answer.",
            {
                "apiVersion": _STR,
                "kind": _STR,
                "metadata": _ref(f"{META}.ListMeta"),
                "status": _STR,
                "message": _STR,
                "reason": _STR,
                "code": {"type": "integer", "format": "int32"},
            },
        ),
    }


def _custom(version: str) -> dict[str, Any]:
    base = f"{CUSTOM_DEFS}.{version}"
    value: dict[str, Any] = {
        "describedObject": _ref(OBJECT_REFERENCE),
        "timestamp": _ref(f"{META}.Time"),
        "value": _ref(QUANTITY),
    }
    defs: dict[str, Any] = {}
    if version == "v1beta1":
        value |= {"metricName": _STR, "window": {"type": "integer", "format": "int64"}}
        value["selector"] = _nullable(f"{META}.LabelSelector")
        required: tuple[str, ...] = ("describedObject", "metricName", "timestamp", "value")
    else:
        defs[f"{base}.MetricIdentifier"] = _obj(
            "A metric's name and the selector of its series.",
            {"name": _STR, "selector": _nullable(f"{META}.LabelSelector")},
            ("name",),
        )
        value |= {"metric": _ref(f"{base}.MetricIdentifier"), "windowSeconds": {"type": "integer", "format": "int64"}}
        required = ("describedObject", "metric", "timestamp", "value")
    defs[f"{base}.MetricValue"] = _obj("The value of a metric for one object.", value, required)
    defs[f"{base}.MetricValueList"] = _list(
        f"{base}.MetricValue", "Values of a metric for objects.", CUSTOM_GROUP, version, "MetricValueList"
    )
    return defs


def _external() -> dict[str, Any]:
    base = f"{EXTERNAL_DEFS}.v1beta1"
    value = {
        "metricName": _STR,
        "metricLabels": {"type": "object", "additionalProperties": _STR},
        "timestamp": _ref(f"{META}.Time"),
        "window": {"type": "integer", "format": "int64"},
        "value": _ref(QUANTITY),
    }
    return {
        f"{base}.ExternalMetricValue": _obj(
            "A value of a metric not tied to an object.", value, ("metricName", "metricLabels", "timestamp", "value")
        ),
        f"{base}.ExternalMetricValueList": _list(
            f"{base}.ExternalMetricValue",
            "Values of an external metric.",
            EXTERNAL_GROUP,
            "v1beta1",
            "ExternalMetricValueList",
        ),
    }


def _param(name: str, where: str = "path") -> dict[str, Any]:
    description = {
        "labelSelector": "which objects (custom metrics) or series (external metrics) to answer for",
        "metricLabelSelector": "which series of the metric to use",
        "fieldSelector": "which objects, by metadata.name or metadata.namespace",
    }.get(name, f"the {name}")
    return {"name": name, "in": where, "required": where == "path", "type": "string", "description": description}


def _get(operation: str, schema: str, params: tuple[str, ...], selectors: bool = True) -> dict[str, Any]:
    parameters = [_param(p) for p in params]
    if selectors:
        parameters += [_param("labelSelector", "query"), _param("metricLabelSelector", "query")]
    return {
        "get": {
            "operationId": operation,
            "produces": ["application/json"],
            "schemes": ["https"],
            "parameters": parameters,
            "responses": {
                "200": {"description": "OK", "schema": _ref(schema)},
                "401": {"description": "Unauthorized"},
                "403": {"description": "Forbidden", "schema": _ref(f"{META}.Status")},
                "404": {"description": "Not found", "schema": _ref(f"{META}.Status")},
            },
        }
    }


def _resource_metrics(version: str) -> dict[str, Any]:
    """NodeMetrics and PodMetrics of metrics.k8s.io/{version}, under the names Kubernetes gives them (the same
    fields at v1 and v1beta1)."""
    base = f"{RESOURCE_DEFS}.{version}"
    usage = {"type": "object", "additionalProperties": _ref(QUANTITY)}
    common = {
        "apiVersion": _STR,
        "kind": _STR,
        "metadata": _ref(f"{META}.ObjectMeta"),
        "timestamp": _ref(f"{META}.Time"),
    }
    common["window"] = {"description": "A Go duration: 5m0s.", "type": "string"}
    defs = {
        f"{META}.ObjectMeta": _obj(
            "The object the metrics are of: its name, namespace and labels.",
            {
                "name": _STR,
                "namespace": _STR,
                "creationTimestamp": _ref(f"{META}.Time"),
                "labels": {"type": "object", "additionalProperties": _STR},
            },
        ),
        f"{base}.ContainerMetrics": _obj(
            "The usage of one container.", {"name": _STR, "usage": usage}, ("name", "usage")
        ),
        f"{base}.NodeMetrics": _obj(
            "The CPU and memory usage of a node.", {**common, "usage": usage}, ("timestamp", "window", "usage")
        ),
        f"{base}.PodMetrics": _obj(
            "The CPU and memory usage of a pod's containers.",
            {**common, "containers": {"type": "array", "items": _ref(f"{base}.ContainerMetrics")}},
            ("timestamp", "window", "containers"),
        ),
    }
    for kind in ("NodeMetrics", "PodMetrics"):
        defs[f"{base}.{kind}"]["x-kubernetes-group-version-kind"] = [
            {"group": RESOURCE_GROUP, "kind": kind, "version": version}
        ]
        defs[f"{base}.{kind}List"] = _list(
            f"{base}.{kind}", f"A list of {kind}.", RESOURCE_GROUP, version, f"{kind}List"
        )
    return defs


def _resource_metrics_paths(prefix: str, tag: str, version: str) -> dict[str, Any]:
    base = f"{RESOURCE_DEFS}.{version}"

    def listing(operation: str, kind: str, params: tuple[str, ...]) -> dict[str, Any]:
        op = _get(operation, f"{base}.{kind}", params, selectors=False)
        op["get"]["parameters"] += [_param("labelSelector", "query"), _param("fieldSelector", "query")]
        return op

    return {
        f"{prefix}/nodes": listing(f"list{tag}NodeMetrics", "NodeMetricsList", ()),
        f"{prefix}/nodes/{{name}}": _get(f"read{tag}NodeMetrics", f"{base}.NodeMetrics", ("name",), False),
        f"{prefix}/pods": listing(f"list{tag}PodMetricsForAllNamespaces", "PodMetricsList", ()),
        f"{prefix}/namespaces/{{namespace}}/pods": listing(
            f"list{tag}NamespacedPodMetrics", "PodMetricsList", ("namespace",)
        ),
        f"{prefix}/namespaces/{{namespace}}/pods/{{name}}": _get(
            f"read{tag}NamespacedPodMetrics", f"{base}.PodMetrics", ("namespace", "name"), False
        ),
    }


def _group_version(group: str, version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The paths and definitions of one served group-version."""
    prefix = f"/apis/{group}/{version}"
    tag = "".join(p.capitalize() for p in group.split(".")[:2]) + version.capitalize()
    paths = {f"{prefix}/": _get(f"get{tag}APIResources", f"{META}.APIResourceList", (), selectors=False)}
    if group == RESOURCE_GROUP:
        return paths | _resource_metrics_paths(prefix, tag, version), _resource_metrics(version)
    if group == EXTERNAL_GROUP:
        defs = _external()
        listing = f"{EXTERNAL_DEFS}.v1beta1.ExternalMetricValueList"
        paths[f"{prefix}/namespaces/{{namespace}}/{{metric}}"] = _get(f"list{tag}", listing, ("namespace", "metric"))
        return paths, defs
    defs = _custom(version)
    listing = f"{CUSTOM_DEFS}.{version}.MetricValueList"
    paths[f"{prefix}/namespaces/{{namespace}}/{{resource}}/{{name}}/{{metric}}"] = _get(
        f"listNamespaced{tag}", listing, ("namespace", "resource", "name", "metric")
    )
    paths[f"{prefix}/{{resource}}/{{name}}/{{metric}}"] = _get(f"list{tag}", listing, ("resource", "name", "metric"))
    paths[f"{prefix}/namespaces/{{namespace}}/metrics/{{metric}}"] = _get(
        f"read{tag}ForNamespace", listing, ("namespace", "metric")
    )
    return paths, defs


def _info() -> dict[str, str]:
    return {"title": "gpuscale-adapter", "version": "v0.1.0"}


def group_versions(groups: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(g, v) for g in groups for v in VERSIONS[g]]


@functools.lru_cache(maxsize=8)
def swagger(groups: tuple[str, ...]) -> bytes:
    """The Swagger 2.0 document of ``groups``."""
    paths: dict[str, Any] = {}
    definitions = _common()
    for group, version in group_versions(groups):
        p, d = _group_version(group, version)
        paths |= p
        definitions |= d
    doc = {"swagger": "2.0", "info": _info(), "paths": paths, "definitions": definitions}
    return json.dumps(doc, sort_keys=True).encode()


def _v3_schema(node: Any) -> Any:
    if isinstance(node, dict):
        if node.get("x-nullable"):
            # OpenAPI 3.0 ignores keywords beside a $ref, so a nullable reference is wrapped
            rest = {k: v for k, v in node.items() if k != "x-nullable"}
            return {"allOf": [_v3_schema(rest)], "nullable": True}
        return {k: (v.replace("#/definitions/", "#/components/schemas/") if k == "$ref" else _v3_schema(v))
                for k, v in node.items()}  # fmt: skip
    if isinstance(node, list):
        return [_v3_schema(v) for v in node]
    return node


def _v3_operation(op: dict[str, Any]) -> dict[str, Any]:
    params = [{k: v for k, v in p.items() if k != "type"} | {"schema": {"type": p["type"]}} for p in op["parameters"]]
    responses = {
        code: {"description": r["description"]}
        | ({"content": {"application/json": {"schema": _v3_schema(r["schema"])}}} if "schema" in r else {})
        for code, r in op["responses"].items()
    }
    return {"operationId": op["operationId"], "parameters": params, "responses": responses}


@functools.lru_cache(maxsize=16)
def openapi_v3(group: str, version: str) -> bytes:
    """The OpenAPI 3.0 document of one group-version."""
    paths, defs = _group_version(group, version)
    doc = {
        "openapi": "3.0.0",
        "info": _info(),
        "paths": {path: {"get": _v3_operation(item["get"])} for path, item in paths.items()},
        "components": {"schemas": _v3_schema(_common() | defs)},
    }
    return json.dumps(doc, sort_keys=True).encode()


def v3_index(groups: tuple[str, ...]) -> dict[str, Any]:
    """``/openapi/v3``: each group-version's document, with a hash that changes when the document does."""
    paths = {}
    for group, version in group_versions(groups):
        digest = hashlib.sha512(openapi_v3(group, version)).hexdigest().upper()
        paths[f"apis/{group}/{version}"] = {"serverRelativeURL": f"/openapi/v3/apis/{group}/{version}?hash={digest}"}
    return {"paths": paths}
