"""The Kubernetes resources metrics can describe: names, kinds, API versions and scope.

A static table stands in for the API server's discovery (a RESTMapper): the adapter needs the kind and scope
of a resource to answer, and these are the resources HPAs point at. A rule naming any other resource still
loads; metrics for it are skipped with a log line."""

from __future__ import annotations

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
        gr = self.group_resource
        base = f"/apis/{gr.group}/{self.version}" if gr.group else f"/api/{self.version}"
        return f"{base}/{gr.resource}"

    def path(self, namespace: str | None = None) -> str:
        if namespace is None or not self.namespaced:
            return self.list_path
        gr = self.group_resource
        base = f"/apis/{gr.group}/{self.version}" if gr.group else f"/api/{self.version}"
        return f"{base}/namespaces/{namespace}/{gr.resource}"


def _info(resource: str, singular: str, kind: str, group: str, version: str, namespaced: bool) -> ResourceInfo:
    return ResourceInfo(GroupResource(resource, group), singular, kind, version, namespaced)


KNOWN: tuple[ResourceInfo, ...] = (
    _info("pods", "pod", "Pod", "", "v1", True),
    _info("namespaces", "namespace", "Namespace", "", "v1", False),
    _info("nodes", "node", "Node", "", "v1", False),
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

_BY_NAME: dict[tuple[str, str], ResourceInfo] = {}
for _r in KNOWN:
    for _name in (_r.group_resource.resource, _r.singular, _r.kind.lower()):
        _BY_NAME[(_r.group_resource.group, _name)] = _r

PODS = _BY_NAME[("", "pods")]
NAMESPACES = _BY_NAME[("", "namespaces")]
NODES = _BY_NAME[("", "nodes")]


def lookup(resource: str, group: str = "") -> ResourceInfo | None:
    """A known resource by plural, singular or lower-case kind (``pod``, ``pods``, ``Deployment``)."""
    return _BY_NAME.get((group, resource.lower()))


def lookup_sanitized(resource: str, sanitized_group: str) -> ResourceInfo | None:
    """A known resource from a label template's output, whose group had dots and dashes turned into ``_``."""
    for r in KNOWN:
        if sanitize_group(r.group_resource.group) == sanitized_group and resource.lower() in (
            r.group_resource.resource,
            r.singular,
        ):
            return r
    return None


def sanitize_group(group: str) -> str:
    return group.replace(".", "_").replace("-", "_")
