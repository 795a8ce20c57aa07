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
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


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


def request_attributes(method: str, raw_path: str) -> RequestAttributes:
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
        verb = "list"
    return RequestAttributes(verb, path, True, group, version, namespace, resource, subresource, name)
