"""The Kubernetes resources metrics can describe: a REST mapping from names to kinds, API versions and scope.

A ``RestMapping`` is what client-go's RESTMapper answers, built from the API server's discovery documents
(``backends/api_resources.py`` reads them, ``backends/rest_mapper.py`` keeps the mapping current). It resolves a
resource by plural, singular or lower-case kind, with or without its group: an empty group matches any group, the
core group first and then the groups in the order discovery lists them, each at its preferred version, as
client-go's priority mapper does (``deployment`` is ``deployments.apps``; ``events`` is the core one).

``BUILT_IN`` holds the resources every cluster's built-in groups serve: the mapping when no Kubernetes API is
configured, and until discovery first answers. Pods, namespaces and nodes are core v1 everywhere, so what depends
only on them (a rule's namespace label) needs no discovery.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class GroupResource:
    resource: str
    group: str = ""

    def __str__(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @classmethod
    def parse(cls, text: str) -> GroupResource:
        """``pods`` or ``deployments.apps`` as the URL carries it."""
        resource, _, group = text.partition(".")
        return cls(resource, group)


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    group_resource: GroupResource
    singular: str
    kind: str
    version: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        group = self.group_resource.group
        return f"{group}/{self.version}" if group else self.version

    @property
    def list_path(self) -> str:
        """The API server path of the collection, without a namespace."""
        return self.path()

    def path(self, namespace: str | None = None) -> str:
        gr = self.group_resource
        base = f"/apis/{gr.group}/{self.version}" if gr.group else f"/api/{self.version}"
        if namespace is None or not self.namespaced:
            return f"{base}/{gr.resource}"
        return f"{base}/namespaces/{namespace}/{gr.resource}"


def sanitize_group(group: str) -> str:
    """A group as a label template writes it: dots and dashes become ``_`` (prometheus-adapter's sanitizer)."""
    return group.replace(".", "_").replace("-", "_")


class RestMapping:
    """Resources in priority order (the first listed wins a name several groups serve); immutable once built."""

    def __init__(self, infos: Iterable[ResourceInfo]) -> None:
        self._infos: dict[GroupResource, ResourceInfo] = {}
        self._by_name: dict[str, list[ResourceInfo]] = {}
        for info in infos:
            if info.group_resource in self._infos:  # a later (less preferred) version of a resource already listed
                continue
            self._infos[info.group_resource] = info
            for name in dict.fromkeys((info.group_resource.resource, info.singular, info.kind.lower())):
                if name:
                    self._by_name.setdefault(name, []).append(info)

    def __iter__(self) -> Iterator[ResourceInfo]:
        return iter(self._infos.values())

    def __len__(self) -> int:
        return len(self._infos)

    def __contains__(self, gr: object) -> bool:
        return gr in self._infos

    def lookup(self, resource: str, group: str = "") -> ResourceInfo | None:
        """The resource named ``resource`` (plural, singular or kind, any case) in ``group``; an empty group matches
        any group, and ``rayclusters.ray.io`` names its group itself."""
        candidates = self._by_name.get(resource.lower(), ())
        for info in candidates:
            if not group or info.group_resource.group == group:
                return info
        if not group and "." in resource:
            name, _, named_group = resource.partition(".")
            return self.lookup(name, named_group)
        return None

    def lookup_sanitized(self, resource: str, sanitized_group: str) -> ResourceInfo | None:
        """A resource from a label template's output, whose group had dots and dashes turned into ``_``."""
        exact = self.lookup(resource, sanitized_group)
        if exact is not None or not sanitized_group:
            return exact
        for info in self._by_name.get(resource.lower(), ()):
            if sanitize_group(info.group_resource.group) == sanitized_group:
                return info
        return None


def _info(resource: str, singular: str, kind: str, group: str, version: str, namespaced: bool) -> ResourceInfo:
    return ResourceInfo(GroupResource(resource, group), singular, kind, version, namespaced)


PODS = _info("pods", "pod", "Pod", "", "v1", True)
NAMESPACES = _info("namespaces", "namespace", "Namespace", "", "v1", False)
NODES = _info("nodes", "node", "Node", "", "v1", False)

BUILT_IN_RESOURCES: tuple[ResourceInfo, ...] = (
    PODS,
    NAMESPACES,
    NODES,
    _info("services", "service", "Service", "", "v1", True),
    _info("persistentvolumes", "persistentvolume", "PersistentVolume", "", "v1", False),
    _info("persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", "", "v1", True),
    _info("replicationcontrollers", "replicationcontroller", "ReplicationController", "", "v1", True),
    _info("deployments", "deployment", "Deployment", "apps", "v1", True),
    _info("statefulsets", "statefulset", "StatefulSet", "apps", "v1", True),
    _info("daemonsets", "daemonset", "DaemonSet", "apps", "v1", True),
    _info("replicasets", "replicaset", "ReplicaSet", "apps", "v1", True),
    _info("jobs", "job", "Job", "batch", "v1", True),
    _info("cronjobs", "cronjob", "CronJob", "batch", "v1", True),
    _info("ingresses", "ingress", "Ingress", "networking.k8s.io", "v1", True),
)
BUILT_IN = RestMapping(BUILT_IN_RESOURCES)
