"""The pods on this node, from a LIST and WATCH of the Kubernetes API: who a UID is, and what a pod is labelled.

Shared GPUs need the first: a process's cgroup names its pod by UID, and the kubelet's pod-resources API names pods
by namespace and name. ``--kubernetes-enable-pod-uid`` and ``--kubernetes-enable-pod-labels`` need the second: a
pod-owned series gets the pod's UID and its (allowed, sanitised) labels from here, so a scrape makes no API call.
Labels are filtered and renamed once per pod update (``pods/labels.py``), and kept only when asked for.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from collector.kube.config import KubeAccess
from collector.kube.watch import KubeWatch, Object
from collector.pods.labels import Labels, PodLabelFilter
from common.freshness import Freshness


@dataclass(frozen=True)
class PodMeta:
    uid: str
    labels: Labels = ()  # already allowed and sanitised; empty unless pod labels were asked for


class PodDirectory(Protocol):
    @property
    def synced(self) -> bool: ...

    def lookup(self, uid: str) -> tuple[str, str] | None:
        """(namespace, name) of the pod with this UID, or None when no such pod runs on this node."""
        ...

    def pod(self, namespace: str, name: str) -> PodMeta | None:
        """The UID and labels of the pod of this name, or None when it is not (yet) known."""
        ...


class KubePodDirectory:
    def __init__(
        self,
        node_name: str,
        access: KubeAccess,
        labels: PodLabelFilter | None = None,
        source: Freshness | None = None,
        request_seconds: float = 15.0,
    ) -> None:
        """``access``: where the API is; ``labels``: how to turn pod labels into series labels, None keeps none;
        ``source``: how fresh the copy is; ``request_seconds``: the most a LIST may take, and a watch's head."""
        self._labels = labels
        self._names: dict[str, tuple[str, str]] = {}  # uid → (namespace, name)
        self._meta: dict[tuple[str, str], PodMeta] = {}  # (namespace, name) → uid, labels
        self._watch = KubeWatch(
            "pod directory",
            access,
            ["/api/v1/pods"],
            f"spec.nodeName={node_name}",
            self._replace,
            self._apply,
            "pods of shared GPUs cannot be named and pod labels are not refreshed",
            source,
            request_seconds,
            metadata_only=True,  # names, UIDs and labels: a pod's spec and status are most of its bytes
        )

    @property
    def synced(self) -> bool:
        return self._watch.synced

    @property
    def source(self) -> Freshness | None:
        return self._watch.source

    @property
    def errors(self) -> Counter[str]:
        return self._watch.errors

    async def run(self) -> None:
        await self._watch.run()

    def lookup(self, uid: str) -> tuple[str, str] | None:
        return self._names.get(uid)

    def pod(self, namespace: str, name: str) -> PodMeta | None:
        return self._meta.get((namespace, name))

    def _entry(self, pod: Object) -> tuple[tuple[str, str], PodMeta] | None:
        meta = pod.get("metadata") or {}
        uid, namespace, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
        if not (uid and namespace and name):
            return None
        labels = meta.get("labels")
        kept = self._labels(labels) if self._labels is not None and isinstance(labels, dict) else ()
        return (namespace, name), PodMeta(uid, kept)

    def _replace(self, pods: list[Object]) -> None:
        entries = [e for e in map(self._entry, pods) if e is not None]
        # new tables swapped in whole: the collection thread reads either the old or the new, never a mix
        self._meta = dict(entries)
        self._names = {meta.uid: key for key, meta in entries}

    def _apply(self, kind: str, pod: Object) -> None:
        entry = self._entry(pod)
        if entry is None:
            return
        key, meta = entry
        if kind == "DELETED":
            self._names.pop(meta.uid, None)
            if (old := self._meta.get(key)) is not None and old.uid == meta.uid:
                del self._meta[key]
        elif kind in ("ADDED", "MODIFIED"):
            self._names[meta.uid] = key
            self._meta[key] = meta
