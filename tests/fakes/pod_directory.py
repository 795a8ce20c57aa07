"""A pod directory that knows the pods a test tells it about (stands in for the Kubernetes API's pod watch)."""

from __future__ import annotations


class StaticPodDirectory:
    def __init__(self, pods: dict[str, tuple[str, str]] | None = None, synced: bool = True) -> None:
        self.pods = dict(pods or {})
        self.synced = synced

    def lookup(self, uid: str) -> tuple[str, str] | None:
        return self.pods.get(uid)
