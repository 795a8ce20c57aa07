"""The OpenAPI documents the aggregator fetches: valid by openapi-spec-validator, and describing what is served."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
from referencing.exceptions import Unresolvable

from adapter.api import openapi
from harness.adapter.in_process import Adapter

CM = "/apis/custom.metrics.k8s.io"
EM = "/apis/external.metrics.k8s.io"
GROUPS = ("custom.metrics.k8s.io", "external.metrics.k8s.io")


def nullable(node: Any) -> Any:
    """Swagger's ``x-nullable`` as JSON Schema says it."""
    if isinstance(node, dict):
        if node.get("x-nullable"):
            return {"anyOf": [{"type": "null"}, nullable({k: v for k, v in node.items() if k != "x-nullable"})]}
        return {k: nullable(v) for k, v in node.items()}
    if isinstance(node, list):
        return [nullable(v) for v in node]
    return node


def conforms(answer: Any, definitions: dict[str, Any], name: str) -> None:
    """``answer`` against the document's own schema (draft 4, as Swagger 2.0's schemas are)."""
    schema = {"$ref": f"#/definitions/{name}", "definitions": nullable(definitions)}
    jsonschema.Draft4Validator(schema).validate(answer)


async def test_swagger_document_is_valid_and_describes_the_answers(adapter: Adapter) -> None:
    doc = await adapter.get("/openapi/v2")
    validate(doc)
    assert f"{CM}/v1beta2/namespaces/{{namespace}}/{{resource}}/{{name}}/{{metric}}" in doc["paths"]
    assert f"{EM}/v1beta1/namespaces/{{namespace}}/{{metric}}" in doc["paths"]
    defs = doc["definitions"]
    v2 = "io.k8s.metrics.pkg.apis.custom_metrics.v1beta2.MetricValueList"
    assert defs[v2]["x-kubernetes-group-version-kind"] == [
        {"group": "custom.metrics.k8s.io", "kind": "MetricValueList", "version": "v1beta2"}
    ]
    wildcard = "namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer"
    conforms(await adapter.get(f"{CM}/v1beta2/{wildcard}"), defs, v2)
    conforms(
        await adapter.get(f"{CM}/v1beta1/{wildcard}"),
        defs,
        "io.k8s.metrics.pkg.apis.custom_metrics.v1beta1.MetricValueList",
    )
    external = await adapter.get(f"{EM}/v1beta1/namespaces/ml/gpu_utilization")
    conforms(external, defs, "io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValueList")
    conforms(await adapter.get(f"{CM}/v1beta2"), defs, "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList")
    conforms(await adapter.get(f"{CM}/v1beta2/nodes/x/nope", 404), defs, "io.k8s.apimachinery.pkg.apis.meta.v1.Status")
    with pytest.raises(jsonschema.ValidationError):
        conforms({"items": [{"metric": {}}]}, defs, v2)


async def test_openapi_v3_index_points_at_a_valid_document_per_group_version(adapter: Adapter) -> None:
    index = await adapter.get("/openapi/v3")
    assert set(index["paths"]) == {
        "apis/custom.metrics.k8s.io/v1beta2",
        "apis/custom.metrics.k8s.io/v1beta1",
        "apis/external.metrics.k8s.io/v1beta1",
    }
    for entry in index["paths"].values():
        url = entry["serverRelativeURL"]
        resp = await adapter.client.get(url)
        assert resp.status == 200
        doc = json.loads(await resp.read())
        validate(doc)
        assert doc["openapi"] == "3.0.0"
        assert all(ref.startswith("#/components/schemas/") for ref in refs(doc))
        # the same document again, by its ETag, is not sent twice
        again = await adapter.client.get(url, headers={"If-None-Match": resp.headers["ETag"]})
        assert again.status == 304
    await adapter.get("/openapi/v3/apis/custom.metrics.k8s.io/v1", 404)
    await adapter.get("/openapi/v3/apis/apps/v1", 404)


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def test_only_served_groups_are_described_and_hashes_follow_the_documents() -> None:
    custom_only = json.loads(openapi.swagger(("custom.metrics.k8s.io",)))
    validate(custom_only)
    assert not [p for p in custom_only["paths"] if "external" in p]
    index = openapi.v3_index(GROUPS)
    hashes = {entry["serverRelativeURL"].split("hash=")[1] for entry in index["paths"].values()}
    assert len(hashes) == 3
    assert openapi.v3_index(GROUPS) == index


def test_the_validator_catches_a_broken_document() -> None:
    doc = json.loads(openapi.swagger(GROUPS))
    broken = copy.deepcopy(doc)
    path = next(p for p in broken["paths"] if "{metric}" in p)
    broken["paths"][path]["get"]["parameters"] = [
        q for q in broken["paths"][path]["get"]["parameters"] if q["name"] != "metric"
    ]
    with pytest.raises(OpenAPIValidationError):
        validate(broken)
    v3 = json.loads(openapi.openapi_v3("custom.metrics.k8s.io", "v1beta2"))
    del v3["components"]["schemas"]["io.k8s.api.core.v1.ObjectReference"]
    with pytest.raises((OpenAPIValidationError, Unresolvable)):
        validate(v3)
