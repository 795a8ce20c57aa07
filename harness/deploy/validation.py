"""Schema validation of rendered objects.

Kubernetes' own kinds (APIService included: apiregistration.k8s.io is built in) are validated by kubernetes-validate
against the OpenAPI schemas it ships, strictly (an unknown field is an error). The Prometheus Operator's
ServiceMonitor, PodMonitor and PrometheusRule, KEDA's ScaledObject, TriggerAuthentication and
ClusterTriggerAuthentication, and cert-manager's Certificate and Issuer (the adapter chart's certManager values) are
custom resources that kubernetes-validate has no schema for; they are validated against the JSON schemas in
schemas/, written for this project from the Operator's API and KEDA's and cert-manager's CRDs (every field the
manifests may use, with its type; any other field is an error). A kind with no schema at all is an error, never a
skip.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from referencing import Registry, Resource

# The oldest Kubernetes the manifests are meant for and the newest kubernetes-validate ships.
K8S_VERSIONS = ("1.28.0", "1.37.0")
SCHEMAS = Path(__file__).parent / "schemas"
CUSTOM_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor.schema.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule.schema.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor.schema.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject.schema.json",
    ("keda.sh/v1alpha1", "TriggerAuthentication"): "triggerauthentication.schema.json",
    ("keda.sh/v1alpha1", "ClusterTriggerAuthentication"): "triggerauthentication.schema.json",
    ("cert-manager.io/v1", "Certificate"): "certificate.schema.json",
    ("cert-manager.io/v1", "Issuer"): "issuer.schema.json",
}


@cache
def _registry() -> Registry[Any]:
    resources = []
    for path in sorted(SCHEMAS.glob("*.schema.json")):
        contents = json.loads(path.read_text())
        resources.append((contents["$id"], Resource.from_contents(contents)))
    return Registry().with_resources(resources)


@cache
def _custom_validator(file: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / file).read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=_registry())


def problems(obj: dict[str, Any], version: str) -> list[str]:
    """What is wrong with ``obj`` for Kubernetes ``version``; empty when it validates."""
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    custom = CUSTOM_KINDS.get((obj.get("apiVersion", ""), obj.get("kind", "")))
    if custom is not None:
        return [
            f"{where}: {'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
            for e in _custom_validator(custom).iter_errors(obj)
        ]
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{where}: {'.'.join(str(p) for p in e.path)}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [f"{where}: {e.message}"]
    return []
