"""A pod directory that knows the pods a test tells it about (stands in for the Kubernetes API's pod watch)."""

from __future__ import annotations

from collector.pods.directory import PodMeta


class StaticPodDirectory:
    def __init__(
        self,
        pods: dict[str, tuple[str, str]] | None = None,
        synced: bool = True,
        labels: dict[str, tuple[tuple[str, str], ...]] | None = None,
    ) -> None:
        """``pods``: uid → (namespace, name); ``labels``: uid → the series labels the pod's labels became."""
        self.pods = dict(pods or {})
        self.labels = dict(labels or {})
        self.synced = synced

    def lookup(self, uid: str) -> tuple[str, str] | None:
        return self.pods.get(uid)

    def pod(self, namespace: str, name: str) -> PodMeta | None:
        uid = next((u for u, key in self.pods.items() if key == (namespace, name)), None)
        return None if uid is None else PodMeta(uid, self.labels.get(uid, ()))
