"""Names and labels of pods, namespaces and nodes, kept current by LIST then WATCH (a reflector).

The HPA averages every item a wildcard request returns, so the adapter must know which objects match the request's
``labelSelector``. Until a resource's first LIST has finished, requests do a live LIST with the selector (answered by
the API server); after that they are answered from memory. A watch that ends is resumed from the last
resourceVersion; one whose version is gone (410) starts over with a LIST, while the old objects keep being served
(the loop is ``common/list_watch.py``). Each resource is a source (``common/freshness.py``): a LIST that works keeps it
fresh, a failure starts its clock, and ``/readyz`` fails while its objects have been failing for over a minute.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

from cachetools import LRUCache

from adapter.backends.kube_api import KubeMetadataAPI, ObjectMeta
from adapter.errors import KubernetesError, ResourceExpired
from adapter.naming import resources
from adapter.naming.resources import GroupResource, ResourceInfo
from adapter.query.selectors import Selector
from adapter.self_metrics import AdapterMetrics
from common.freshness import DEFAULT_TIMING, STALE_AFTER_SECONDS, Timing
from common.list_watch import Restart, list_watch

log = logging.getLogger(__name__)

CACHED = (resources.PODS, resources.NAMESPACES, resources.NODES)
WATCH_TIMEOUT_SECONDS = 300


class Reflector:
    """One resource's objects by namespace and name."""

    def __init__(
        self,
        api: KubeMetadataAPI,
        info: ResourceInfo,
        metrics: AdapterMetrics,
        max_backoff: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
        stale_after: float = STALE_AFTER_SECONDS,
    ) -> None:
        self.api = api
        self.info = info
        self.metrics = metrics
        self.max_backoff = max_backoff
        self.sleep = sleep
        self.clock = clock
        self.jitter = jitter
        self.synced = False
        self.resource_version = ""
        self._objects: dict[str | None, dict[str, Mapping[str, str]]] = {}
        self._label = str(info.group_resource)
        self.source = metrics.sources.add(f"object-cache/{self._label}", stale_after, clock)
        # the HPA asks the same selector every sync period: answers are kept until any object changes
        self._generation = 0
        self._answers: LRUCache[tuple[str | None, Selector], tuple[int, list[str]]] = LRUCache(1024)

    def names(self, namespace: str | None, selector: Selector) -> list[str]:
        """Sorted names of the matching objects; the list is shared, callers must not change it."""
        key = (namespace if self.info.namespaced else None, selector)
        hit = self._answers.get(key)
        if hit is not None and hit[0] == self._generation:
            return hit[1]
        by_name = self._objects.get(key[0], {})
        if not selector:
            names = sorted(by_name)
        else:
            names = sorted(name for name, labels in by_name.items() if selector.matches(labels))
        self._answers[key] = (self._generation, names)
        return names

    def objects(self, namespace: str | None, selector: Selector) -> list[ObjectMeta]:
        """The matching objects with their labels, by namespace and name; of every namespace when ``namespace``
        is None (metrics.k8s.io lists pods across namespaces)."""
        if namespace is None or not self.info.namespaced:
            spaces = list(self._objects.items())
        else:
            spaces = [(namespace, self._objects.get(namespace, {}))]
        found = [
            ObjectMeta(name, ns, labels)
            for ns, by_name in spaces
            for name, labels in by_name.items()
            if selector.matches(labels)
        ]
        return sorted(found, key=_by_place)

    def __len__(self) -> int:
        return sum(len(v) for v in self._objects.values())

    def _replace(self, items: list[ObjectMeta]) -> None:
        objects: dict[str | None, dict[str, Mapping[str, str]]] = {}
        for item in items:
            objects.setdefault(self._key(item), {})[item.name] = item.labels
        self._objects = objects
        self._generation += 1

    def _key(self, item: ObjectMeta) -> str | None:
        return item.namespace if self.info.namespaced else None

    async def list_once(self) -> None:
        listed = await self.api.list(self.info)
        self._replace(listed.items)
        self.resource_version = listed.resource_version
        self.synced = True
        self.source.succeeded()
        self.metrics.kube_synced.labels(self._label).set(1)
        self.metrics.kube_objects.labels(self._label).set(len(self))

    async def _watch(self, version: str) -> AsyncIterator[str]:
        """Apply one watch stream's events as they come, yielding each one's resourceVersion."""
        try:
            async for event in self.api.watch(self.info, version, WATCH_TIMEOUT_SECONDS):
                if event.object is not None:
                    by_name = self._objects.setdefault(self._key(event.object), {})
                    if event.type == "DELETED":
                        by_name.pop(event.object.name, None)
                    else:
                        by_name[event.object.name] = event.object.labels
                    self._generation += 1
                if event.resource_version:
                    self.resource_version = event.resource_version
                yield event.resource_version
        finally:
            self.metrics.kube_objects.labels(self._label).set(len(self))

    async def _list(self) -> str:
        await self.list_once()
        return self.resource_version

    def _restarted(self, why: Restart, error: BaseException | None) -> None:
        self.metrics.kube_watch_restarts.labels(self._label, why).inc()
        if why == "error":
            self.source.failed(str(error) or type(error).__name__)
        if why == "expired":
            log.info("%s: %s; listing again", self._label, error)
        elif isinstance(error, KubernetesError):
            log.warning("%s: %s; listing again after a back-off", self._label, error)
        elif error is not None:
            log.warning("%s: malformed answer from the API server (%s); listing again", self._label, error)

    async def run(self) -> None:
        await list_watch(
            self._list,
            self._watch,
            ResourceExpired.caused,
            self._restarted,
            self.max_backoff,
            self.sleep,
            self.clock,
            self.jitter,
        )


def _by_place(meta: ObjectMeta) -> tuple[str, str]:
    return meta.namespace or "", meta.name


@dataclass(frozen=True)
class Listing:
    """Object names for a request, and where they came from (explain shows it)."""

    names: list[str] | None
    source: str


class ObjectLister:
    """Names of the objects a wildcard request covers: from the watch cache, or a live LIST until it synced."""

    def __init__(self, api: KubeMetadataAPI | None, metrics: AdapterMetrics, timing: Timing = DEFAULT_TIMING) -> None:
        self.api = api
        self.metrics = metrics
        self.reflectors: dict[GroupResource, Reflector] = {}
        if api is not None:
            bound = timing.bound()
            for info in CACHED:
                self.reflectors[info.group_resource] = Reflector(
                    api, info, metrics, timing.max_backoff, stale_after=bound
                )

    @property
    def synced(self) -> bool:
        return all(r.synced for r in self.reflectors.values())

    async def names(self, info: ResourceInfo, namespace: str | None, selector: Selector) -> Listing:
        if self.api is None:
            return Listing(None, "no Kubernetes API configured: every object Prometheus has a series for")
        reflector = self.reflectors.get(info.group_resource)
        if reflector is not None and reflector.synced:
            return Listing(reflector.names(namespace, selector), "watch cache")
        self.metrics.kube_live_lists.labels(str(info.group_resource)).inc()
        listed = await self.api.list(info, namespace if info.namespaced else None, str(selector))
        why = "cache not synced yet" if reflector is not None else "resource not cached"
        return Listing(sorted(item.name for item in listed.items), f"live LIST ({why})")

    async def objects(self, info: ResourceInfo, namespace: str | None, selector: Selector) -> list[ObjectMeta] | None:
        """The matching objects with their labels (of every namespace when ``namespace`` is None), from the watch
        cache or a live LIST until it synced; None without a Kubernetes API."""
        if self.api is None:
            return None
        reflector = self.reflectors.get(info.group_resource)
        if reflector is not None and reflector.synced:
            return reflector.objects(namespace, selector)
        self.metrics.kube_live_lists.labels(str(info.group_resource)).inc()
        listed = await self.api.list(info, namespace if info.namespaced else None, str(selector))
        return sorted(listed.items, key=_by_place)
