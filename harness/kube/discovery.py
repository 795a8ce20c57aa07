"""API discovery as kube-apiserver serves it, for the stand-in API server; written from the Kubernetes API reference
(the meta/v1 discovery types and k8s.io/api apidiscovery/v2), not from the adapter's reader.

- Legacy documents: ``APIVersions`` at ``/api``, ``APIGroupList`` at ``/apis``, ``APIGroup`` at ``/apis/<group>``,
  ``APIResourceList`` at ``/api/v1`` and ``/apis/<group>/<version>`` (subresources as ``pods/status`` entries).
- Aggregated discovery (Kubernetes 1.26+): ``/api`` and ``/apis`` answer an ``APIGroupDiscoveryList`` when the
  Accept header asks for one (``application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList``, or
  ``v2beta1``), with that Content-Type; ``aggregated`` lists the versions this server speaks (none: a server older
  than 1.26, which answers the legacy documents whatever is asked).
- A group version whose server is down (``unavailable``): its ``APIResourceList`` answers 503 ServiceUnavailable and
  aggregated discovery marks it ``freshness: Stale``, as kube-apiserver does for an APIService that does not answer.
- Custom resources are added with ``add`` (a CRD installed); the built-in table is a 1.30 cluster's common groups.
- The groups of APIServices (``harness/kube/aggregator.py``, whose paths it proxies) are listed after the server's own;
  aggregated discovery lists their versions without resources (kube-apiserver would read those from the extension
  server; nothing here depends on them).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from harness.kube.wire import status_body

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
_AGGREGATED = re.compile(r"application/json;\s*g=apidiscovery\.k8s\.io;\s*v=(v2|v2beta1);\s*as=APIGroupDiscoveryList")


@dataclass(frozen=True)
class Served:
    """One resource of one group, served at every version in ``versions`` (the preferred first)."""

    group: str
    versions: tuple[str, ...]
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS

    @property
    def name(self) -> str:
        """``pods``, ``deployments.apps``: how the stand-in's objects are keyed."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _core(plural: str, singular: str, kind: str, namespaced: bool = True, *more: Any) -> Served:
    return Served("", ("v1",), plural, singular, kind, namespaced, *more)


_REVIEW = ("create",)
BUILT_IN = (
    _core("configmaps", "configmap", "ConfigMap", True, ("cm",)),
    _core("endpoints", "endpoints", "Endpoints", True, ("ep",)),
    _core("events", "event", "Event", True, ("ev",)),
    _core("namespaces", "namespace", "Namespace", False, ("ns",), ("finalize", "status")),
    _core("nodes", "node", "Node", False, ("no",), ("proxy", "status")),
    _core("persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", True, ("pvc",), ("status",)),
    _core("persistentvolumes", "persistentvolume", "PersistentVolume", False, ("pv",), ("status",)),
    _core("pods", "pod", "Pod", True, ("po",), ("binding", "eviction", "exec", "log", "status")),
    _core("replicationcontrollers", "replicationcontroller", "ReplicationController", True, ("rc",), ("scale",)),
    _core("secrets", "secret", "Secret", True),
    _core("serviceaccounts", "serviceaccount", "ServiceAccount", True, ("sa",), ("token",)),
    _core("services", "service", "Service", True, ("svc",), ("proxy", "status")),
    Served("apps", ("v1",), "daemonsets", "daemonset", "DaemonSet", True, ("ds",), ("status",)),
    Served("apps", ("v1",), "deployments", "deployment", "Deployment", True, ("deploy",), ("scale", "status")),
    Served("apps", ("v1",), "replicasets", "replicaset", "ReplicaSet", True, ("rs",), ("scale", "status")),
    Served("apps", ("v1",), "statefulsets", "statefulset", "StatefulSet", True, ("sts",), ("scale", "status")),
    Served("events.k8s.io", ("v1",), "events", "event", "Event", True, ("ev",)),
    Served("authentication.k8s.io", ("v1",), "tokenreviews", "tokenreview", "TokenReview", False, verbs=_REVIEW),
    Served(
        "authorization.k8s.io", ("v1",), "subjectaccessreviews", "subjectaccessreview", "SubjectAccessReview", False,
        verbs=_REVIEW,
    ),
    Served(
        "autoscaling", ("v2", "v1"), "horizontalpodautoscalers", "horizontalpodautoscaler", "HorizontalPodAutoscaler",
        True, ("hpa",), ("status",),
    ),
    Served("batch", ("v1",), "cronjobs", "cronjob", "CronJob", True, ("cj",), ("status",)),
    Served("batch", ("v1",), "jobs", "job", "Job", True, (), ("status",)),
    Served("networking.k8s.io", ("v1",), "ingresses", "ingress", "Ingress", True, ("ing",), ("status",)),
    Served("policy", ("v1",), "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", True, ("pdb",)),
    Served(
        "apiextensions.k8s.io", ("v1",), "customresourcedefinitions", "customresourcedefinition",
        "CustomResourceDefinition", False, ("crd", "crds"), ("status",),
    ),
    Served("coordination.k8s.io", ("v1",), "leases", "lease", "Lease", True),
    # Dynamic Resource Allocation (GA in 1.34): the collector maps DRA devices to GPUs through a node's slices
    Served("resource.k8s.io", ("v1", "v1beta2", "v1beta1"), "resourceslices", "resourceslice", "ResourceSlice", False),
)  # fmt: skip


@dataclass
class Discovery:
    """The resources the stand-in serves, and its discovery documents."""

    resources: list[Served] = field(default_factory=lambda: list(BUILT_IN))
    api_services: Callable[[], list[tuple[str, str]]] = list  # (group, version) of each APIService, preferred first
    aggregated: tuple[str, ...] = ("v2", "v2beta1")
    unavailable: set[tuple[str, str]] = field(default_factory=set)  # (group, version) whose server is down

    def add(self, served: Served) -> None:
        """A custom resource, as a CRD makes one (served from now on)."""
        self.resources = [r for r in self.resources if r.name != served.name] + [served]

    def find(self, name: str) -> Served | None:
        return next((r for r in self.resources if r.name == name), None)

    def groups(self) -> dict[str, list[str]]:
        """Group → versions (the preferred first), in the order ``/apis`` lists them (the core group first)."""
        found: dict[str, list[str]] = {}
        for r in self.resources:
            versions = found.setdefault(r.group, [])
            versions += [v for v in r.versions if v not in versions]
        for group, version in self.api_services():
            versions = found.setdefault(group, [])
            versions += [version] if version not in versions else []
        return found

    def add_routes(self, app: web.Application, wrap: Callable[[Handler], Handler]) -> None:
        app.router.add_get("/api", wrap(self._api))
        app.router.add_get("/api/{version}", wrap(self._core_version))
        app.router.add_get("/apis", wrap(self._apis))
        app.router.add_get("/apis/{group}", wrap(self._group))
        app.router.add_get("/apis/{group}/{version}", wrap(self._group_version))

    # --- legacy documents ------------------------------------------------------------------------------------

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        entries = []
        for r in self.resources:
            if r.group != group or version not in r.versions:
                continue
            entry: dict[str, Any] = {
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(r.verbs),
            }
            if r.short_names:
                entry["shortNames"] = list(r.short_names)
            entries.append(entry)
            for sub in r.subresources:
                kind = "Scale" if sub == "scale" else r.kind
                more = {"group": "autoscaling", "version": "v1"} if sub == "scale" else {}
                verbs = ["get", "patch", "update"] if sub in ("status", "scale") else ["create", "get"]
                entries.append(
                    {"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced, **more,
                     "kind": kind, "verbs": verbs}
                )  # fmt: skip
        document: dict[str, Any] = {
            "kind": "APIResourceList",
            "groupVersion": f"{group}/{version}" if group else version,
        }
        if group:
            document["apiVersion"] = "v1"
        document["resources"] = entries
        return document

    def _group_document(self, group: str, versions: list[str]) -> dict[str, Any]:
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": listed, "preferredVersion": listed[0]}

    # --- aggregated discovery --------------------------------------------------------------------------------

    def _aggregated(self, core: bool, version: str) -> dict[str, Any]:
        items = []
        for group, versions in self.groups().items():
            if (group == "") != core:
                continue
            metadata = {"name": group, "creationTimestamp": None} if group else {"creationTimestamp": None}
            listed = []
            for v in versions:
                stale = (group, v) in self.unavailable
                resources = [
                    self._aggregated_resource(r) for r in self.resources if r.group == group and v in r.versions
                ]
                listed.append({"version": v, "resources": resources, "freshness": "Stale" if stale else "Current"})
            items.append({"metadata": metadata, "versions": listed})
        return {
            "kind": "APIGroupDiscoveryList",
            "apiVersion": f"apidiscovery.k8s.io/{version}",
            "metadata": {},
            "items": items,
        }

    @staticmethod
    def _aggregated_resource(r: Served) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "resource": r.plural,
            "responseKind": {"group": "", "version": "", "kind": r.kind},
            "scope": "Namespaced" if r.namespaced else "Cluster",
            "singularResource": r.singular,
            "verbs": list(r.verbs),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.subresources:
            entry["subresources"] = [
                {
                    "subresource": sub,
                    "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}
                    if sub == "scale"
                    else {"group": "", "version": "", "kind": r.kind},
                    "verbs": ["get", "patch", "update"] if sub in ("status", "scale") else ["create", "get"],
                }
                for sub in r.subresources
            ]
        return entry

    def _negotiated(self, request: web.Request) -> str | None:
        """The aggregated discovery version the Accept header asks for and this server speaks, in the client's order."""
        for match in _AGGREGATED.finditer(request.headers.get("Accept", "")):
            if match[1] in self.aggregated:
                return match[1]
        return None

    # --- handlers --------------------------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        version = self._negotiated(request)
        if version:
            return _aggregated_response(self._aggregated(True, version), version)
        address = {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}
        return web.json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [address]})

    async def _apis(self, request: web.Request) -> web.Response:
        version = self._negotiated(request)
        if version:
            return _aggregated_response(self._aggregated(False, version), version)
        groups = [self._group_document(g, vs) for g, vs in self.groups().items() if g]
        return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})

    async def _group(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        versions = self.groups().get(group)
        if not group or not versions:
            return _not_found()
        return web.json_response({"kind": "APIGroup", "apiVersion": "v1", **self._group_document(group, versions)})

    async def _core_version(self, request: web.Request) -> web.Response:
        if request.match_info["version"] != "v1":
            return _not_found()
        return web.json_response(self._resource_list("", "v1"))

    async def _group_version(self, request: web.Request) -> web.Response:
        group, version = request.match_info["group"], request.match_info["version"]
        if not group or version not in self.groups().get(group, []):
            return _not_found()
        if (group, version) in self.unavailable:
            return web.json_response(
                status_body(503, "ServiceUnavailable", "the server is currently unable to handle the request"),
                status=503,
            )
        return web.json_response(self._resource_list(group, version))


def _aggregated_response(body: dict[str, Any], version: str) -> web.Response:
    content_type = f"application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
    response = web.json_response(body, headers={"Vary": "Accept"})
    response.headers["Content-Type"] = content_type
    return response


def _not_found() -> web.Response:
    return web.json_response(
        status_body(404, "NotFound", "the server could not find the requested resource"), status=404
    )
