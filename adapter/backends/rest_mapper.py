"""The REST mapping in force, kept current from API discovery: what client-go's deferred discovery RESTMapper does
for prometheus-adapter, which reads it once at start (its ``--discovery-interval`` is 0 by default and nothing runs
the refresh), where this adapter keeps it current for CRDs installed later.

The mapping is read at start, again every ``--discovery-interval`` (10 minutes by default; after a failed read within
``RETRY_SECONDS``), and when a request names a resource the mapping does not know (a CRD installed
since): that refresh is made at most once per ``ON_DEMAND_GAP_SECONDS`` (a refresh in flight is joined instead), so a
misspelt resource asked every HPA sync period does not turn into a discovery storm. A refresh that fails keeps the
mapping in force; a group version that cannot be read keeps its resources from the last mapping that had them. Until
discovery first answers, and when no Kubernetes API is configured, the mapping is the built-in one
(``naming/resources.py``).

The refresh is the source ``discovery/api-resources`` (``common/freshness.py``), reported under ``/readyz``'s discovery
check without failing it: the mapping in force keeps answering.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from adapter.backends.api_resources import ResourceDiscoveryAPI
from adapter.errors import KubernetesError
from adapter.naming.resources import BUILT_IN, GroupResource, ResourceInfo, RestMapping
from adapter.self_metrics import AdapterMetrics
from common.freshness import DEFAULT_TIMING, Timing

log = logging.getLogger(__name__)

ON_DEMAND_GAP_SECONDS = 30.0
RETRY_SECONDS = 30.0  # after a failed read, sooner than the interval: the mapping may still be the built-in one


class RestMapper:
    def __init__(
        self,
        api: ResourceDiscoveryAPI | None,
        metrics: AdapterMetrics,
        interval: float,
        timing: Timing = DEFAULT_TIMING,
        gap: float = ON_DEMAND_GAP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.api = api
        self.interval = interval
        self.gap = gap
        self.clock = clock
        self.sleep = sleep
        self.mapping = BUILT_IN
        self.attempted = api is None
        self.source = metrics.sources.add("discovery/api-resources", timing.bound(interval)) if api else None
        self._refreshing: asyncio.Future[None] | None = None
        self._on_demand: float | None = None  # clock() when the last refresh for an unknown resource began
        self._failed: dict[tuple[str, str], str] = {}

    async def refresh(self) -> None:
        """Read discovery once (joining a refresh in flight); never raises for the API server's failures. Without a
        Kubernetes API there is nothing to read."""
        if self.api is None:
            return
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh())
        await asyncio.shield(self._refreshing)

    async def resolve(self, gr: GroupResource) -> ResourceInfo | None:
        """``gr`` by the mapping; one it does not know triggers a refresh, unless one was made for that reason
        within ``gap`` (a refresh in flight is waited for)."""
        info = self.mapping.lookup(gr.resource, gr.group)
        if info is not None or self.api is None:
            return info
        if self._refreshing is not None and not self._refreshing.done():
            await self.refresh()
        elif self._on_demand is None or self.clock() - self._on_demand >= self.gap:
            self._on_demand = self.clock()
            log.info("%s is not in the REST mapping; reading API discovery again", gr)
            await self.refresh()
        return self.mapping.lookup(gr.resource, gr.group)

    async def run(self) -> None:
        """Refresh every interval, forever (the first refresh is made at start, see ``components.py``)."""
        while True:
            failing = self.source is not None and self.source.failing_since is not None
            await self.sleep(min(self.interval, RETRY_SECONDS) if failing else self.interval)
            await self.refresh()

    async def _refresh(self) -> None:
        assert self.api is not None
        assert self.source is not None
        try:
            found = await self.api.discover()
        except KubernetesError as e:
            log.warning("API discovery failed; the mapping in force (%d resources) stays: %s", len(self.mapping), e)
            self.source.failed(str(e))
            return
        finally:
            self.attempted = True
        kept = [info for info in self.mapping if (info.group_resource.group, info.version) in found.failed]
        mapping = RestMapping((*found.resources, *kept))
        if found.failed != self._failed:
            for (group, version), why in sorted(found.failed.items()):
                log.warning("API discovery: %s/%s not read (%s)", group or "core", version, why)
            self._failed = dict(found.failed)
        if tuple(mapping) != tuple(self.mapping):
            groups = len({info.group_resource.group for info in mapping})
            how = "aggregated discovery" if found.aggregated else "legacy discovery documents"
            log.info("REST mapping: %d resources in %d groups, from %s", len(mapping), groups, how)
            self.mapping = mapping
        self.source.succeeded()
