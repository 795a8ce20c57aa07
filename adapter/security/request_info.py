"""What a request asks for, in the terms of a SubjectAccessReview, derived as Kubernetes' ``RequestInfoFactory``
derives it, so RBAC rules written for other metrics servers mean the same here.

Under ``/apis/{group}/{version}/`` a request is a resource request: ``namespaces/{ns}/`` sets the namespace, then
the parts are resource, name, subresource. So ``namespaces/ml/pods/*/gpu_utilization`` is verb ``get`` on
``pods/gpu_utilization`` named ``*`` in ``ml``; ``nodes/n1/gpu_utilization`` is ``get`` on ``nodes/gpu_utilization``
named ``n1``; an external metric ``namespaces/ml/queue_depth`` has no name, so its verb is ``list`` on resource
``queue_depth``; the Namespace form ``namespaces/ml/metrics/m`` is ``get`` on ``metrics`` named ``m``. Everything
else (``/apis``, ``/apis/{group}``, ``/apis/{group}/{version}``, ``/openapi/v2``, ``/metrics``) is a non-resource
request: its path and the method's verb. Segments are percent-decoded one by one, as the handlers decode them, so
the review describes exactly what would be served (``%2A`` is ``*``; an encoded ``/`` stays inside a name).

``reviewed`` is what a request is authorized as. A custom-metrics resource is named as the answer resolves it through
the REST mapping (``Pods``, ``pod`` and ``PODS`` are answered as ``pods``, so they are reviewed as ``pods``: an RBAC
rule for ``pods`` is what they read). ``/explain/<request>`` reads that request's data, so it is reviewed as the
request too, besides its own path: a caller may explain only what it may ask.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from dataclasses import dataclass

from adapter.naming.resources import GroupResource, RestMapping

_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
CUSTOM_GROUP = (
    "custom.metrics.k8s.io"  # the group whose resources are Kubernetes resources named any way the mapping knows
)
EXPLAIN = "/explain"


@dataclass(frozen=True)
class RequestAttributes:
    verb: str
    path: str
    resource_request: bool = False
    group: str = ""
    version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


def request_attributes(method: str, raw_path: str, watch: bool = False) -> RequestAttributes:
    """``watch``: the request's ``?watch`` is true, which makes a list a ``watch``, as the API server reads it."""
    verb = _VERBS.get(method.upper(), method.lower())
    path = urllib.parse.unquote(raw_path)
    parts = [urllib.parse.unquote(p) for p in raw_path.strip("/").split("/")] if raw_path.strip("/") else []
    # /apis/{group}/{version}/{resource...}: fewer parts is discovery, a non-resource request
    if len(parts) < 4 or parts[0] != "apis":
        return RequestAttributes(verb, path)
    group, version, rest = parts[1], parts[2], parts[3:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if verb == "get" and not name:
        verb = "watch" if watch else "list"
    return RequestAttributes(verb, path, True, group, version, namespace, resource, subresource, name)


def reviewed(method: str, raw_path: str, mapping: RestMapping | None, watch: bool = False) -> list[RequestAttributes]:
    """The attributes a request is authorized as (every one must be allowed): its own, the resource named as the
    answer resolves it; for ``/explain/<request>``, the explained request's too."""
    out = [_resolved(request_attributes(method, raw_path, watch), mapping)]
    if raw_path.startswith(EXPLAIN + "/apis/"):
        out.append(_resolved(request_attributes(method, raw_path[len(EXPLAIN) :], watch), mapping))
    return out


def _resolved(attrs: RequestAttributes, mapping: RestMapping | None) -> RequestAttributes:
    if mapping is None or not attrs.resource_request or attrs.group != CUSTOM_GROUP:
        return attrs
    if attrs.resource == "metrics" and attrs.namespace:
        return attrs  # namespaces/{ns}/metrics/{metric}: the Namespace itself, not a resource named metrics
    gr = GroupResource.parse(attrs.resource)
    info = mapping.lookup(gr.resource, gr.group)
    return attrs if info is None else dataclasses.replace(attrs, resource=str(info.group_resource))
