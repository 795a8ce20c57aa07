"""Request paths of the metrics APIs, parsed into requests (pure; every path form the metrics APIs have).

Segments are split from the raw, still percent-encoded path and decoded one by one, so ``%2A`` is ``*`` and an
encoded ``/`` inside a name never splits it.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from adapter.errors import BadRequest, NotFound
from adapter.naming.resources import GroupResource
from adapter.query.selectors import Selector, parse_selector

CUSTOM_GROUP = "custom.metrics.k8s.io"
EXTERNAL_GROUP = "external.metrics.k8s.io"
RESOURCE_GROUP = "metrics.k8s.io"  # served by resource_routes.py, from the rules file's resourceRules
# Each group's versions, the preferred first. metrics.k8s.io/v1 (Kubernetes 1.37) is v1beta1 renamed, so both serve
# the same objects; v1 comes first as Kubernetes ranks a GA version above its beta (kube-aggregator, at equal
# versionPriority), and kubectl top 1.37 asks for the first version discovery lists that it knows.
VERSIONS = {CUSTOM_GROUP: ("v1beta2", "v1beta1"), EXTERNAL_GROUP: ("v1beta1",), RESOURCE_GROUP: ("v1", "v1beta1")}
NO_SUCH_PATH = "the server could not find the requested resource"


@dataclass(frozen=True)
class ResourceListRequest:
    group: str
    version: str


@dataclass(frozen=True)
class CustomRequest:
    version: str
    resource: GroupResource
    namespace: str | None
    name: str | None  # None: every object (``*``)
    metric: str
    label_selector: Selector
    metric_selector: Selector


@dataclass(frozen=True)
class ExternalRequest:
    version: str
    namespace: str
    metric: str
    metric_selector: Selector


Request = ResourceListRequest | CustomRequest | ExternalRequest


def split(raw_path: str) -> list[str]:
    parts = raw_path.strip("/").split("/")
    decoded = [urllib.parse.unquote(p, errors="strict") if "%" in p else p for p in parts]
    if any(not p for p in decoded):
        raise NotFound(NO_SUCH_PATH)
    return decoded


def _name(segment: str) -> str | None:
    return None if segment == "*" else segment


def _selector(query: Mapping[str, str], key: str) -> Selector:
    return parse_selector(query.get(key, ""), key)


def parse_metrics_path(raw_path: str, query: Mapping[str, str]) -> Request:
    """``/apis/{group}/{version}/...`` into a request; NotFound for shapes the APIs do not have."""
    try:
        parts = split(raw_path)
    except UnicodeDecodeError as e:
        raise BadRequest(f"the path is not valid percent-encoded UTF-8: {e}") from e
    if len(parts) < 3 or parts[0] != "apis" or parts[2] not in VERSIONS.get(parts[1], ()):
        raise NotFound(NO_SUCH_PATH)
    if parts[1] == RESOURCE_GROUP:
        # served by resource_routes.py; explain, which parses here, covers the custom and external metrics only
        raise NotFound(NO_SUCH_PATH)
    group, version, rest = parts[1], parts[2], parts[3:]
    if not rest:
        return ResourceListRequest(group, version)
    if group == EXTERNAL_GROUP:
        if len(rest) != 3 or rest[0] != "namespaces":
            raise NotFound(NO_SUCH_PATH)
        if rest[1] == "*":
            raise BadRequest("external metrics are namespaced: the namespace must be a name, not '*'")
        return ExternalRequest(version, rest[1], rest[2], _selector(query, "labelSelector"))
    label_selector = _selector(query, "labelSelector")
    metric_selector = _selector(query, "metricLabelSelector")
    if len(rest) == 3:
        resource, name, metric = rest
        return CustomRequest(
            version, GroupResource.parse(resource), None, _name(name), metric, label_selector, metric_selector
        )
    if len(rest) == 4 and rest[0] == "namespaces" and rest[2] == "metrics":
        return CustomRequest(
            version, GroupResource("namespaces"), None, _name(rest[1]), rest[3], label_selector, metric_selector
        )
    if len(rest) == 5 and rest[0] == "namespaces":
        _, namespace, resource, name, metric = rest
        if namespace == "*":
            raise BadRequest("the namespace must be a name, not '*'")
        return CustomRequest(
            version, GroupResource.parse(resource), namespace, _name(name), metric, label_selector, metric_selector
        )
    raise NotFound(NO_SUCH_PATH)
