"""How fresh each background source's data is: what a program's readiness probe and ``/metrics`` report about it.

A source is something kept current in the background: in the adapter the discovery relist, API discovery (the REST
mapping), each resource of the object cache, the authentication ConfigMap, each set of watched files; in the collector
the collection cycle, the kubelet's pod-resources, the pods of its node, its DRA ResourceSlices, the counters
ConfigMap, the GPUs bound to the driver. It reports ``succeeded()`` (a LIST, relist, read or look that worked) and
``failed(why)``; the first failure after a success starts the clock, the next success stops it. A source that has
been failing for longer than its bound is *stale*: the probe (the adapter's ``/readyz``, the collector's ``/health``)
fails while it is, unless the source's check is advisory, and one line is logged when it becomes stale and one when
it recovers. An open, quiet watch is not failing: no news is not a failure.

The bounds (``Timing``): 60 s for watches and file checks, whose retries back off to at most 30 s, so that a few
failed attempts in a row, not one unlucky one, make a source stale; max(60 s, twice its interval) for what is
refreshed on an interval (the relist, the file checks), so that one missed refresh is not yet stale.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.core import Metric

log = logging.getLogger(__name__)

STALE_AFTER_SECONDS = 60.0
MAX_BACKOFF_SECONDS = 30.0


@dataclass(frozen=True)
class Timing:
    """How long a background source may fail before it is stale, and the longest wait between its retries."""

    stale_after: float = STALE_AFTER_SECONDS
    max_backoff: float = MAX_BACKOFF_SECONDS

    def bound(self, interval: float = 0.0) -> float:
        """The bound of a source refreshed every ``interval`` (0: a watch)."""
        return max(self.stale_after, 2 * interval)


DEFAULT_TIMING = Timing()


class Freshness:
    """One source: when it last succeeded, and since when it has been failing (None: it is not)."""

    def __init__(
        self,
        name: str,
        bound: float,
        clock: Callable[[], float] = time.monotonic,
        gates_readiness: bool = True,
        probe: str = "/readyz",
    ) -> None:
        """``probe``: the path that fails while the source is stale, named in the log (unless it is advisory)."""
        self.name = name
        self.check = name.partition("/")[0]  # the probe's line it belongs to: "object-cache" for "object-cache/pods"
        self.gates_readiness = gates_readiness
        self.probe = probe
        self.bound = bound
        self.clock = clock
        self.last_success: float | None = None  # wall-clock time, for /metrics
        self.failing_since: float | None = None
        self.error = ""
        self._announced = False

    def succeeded(self) -> None:
        if self._announced and self.failing_since is not None:
            log.info("%s recovered after failing for %.0f s", self.name, self.clock() - self.failing_since)
        self.last_success = time.time()
        self.failing_since = None
        self.error = ""
        self._announced = False

    def failed(self, error: str) -> None:
        if self.failing_since is None:
            self.failing_since = self.clock()
        self.error = error
        self.stale()

    def stale(self) -> bool:
        if self.failing_since is None or self.clock() - self.failing_since <= self.bound:
            return False
        if not self._announced:
            self._announced = True
            effect = (
                f"{self.probe} fails until it recovers" if self.gates_readiness else "the last good data stays in use"
            )
            log.warning("%s; %s", self._describe(self.failing_since), effect)
        return True

    def problem(self) -> str | None:
        """Why the source is stale, or None while it is not."""
        if not self.stale() or self.failing_since is None:
            return None
        return self._describe(self.failing_since)

    def _describe(self, since: float) -> str:
        return f"{self.name} failing for {self.clock() - since:.0f}s (more than {self.bound:g}s): {self.error}"


class Sources:
    """Every source of one program, by name; at each scrape, when each last succeeded and whether it is stale.

    A prometheus_client collector (its ``Collector`` is a protocol: ``collect`` is all it asks) for the adapter's
    registry. prometheus_client is imported only when that is called: the collector renders its own pages from the
    sources, and the library would cost it 1 MB of resident memory."""

    def __init__(self, prefix: str, probe: str, advisory: frozenset[str] = frozenset()) -> None:
        """``probe``: the path that stale sources fail; ``advisory``: the checks whose stale sources it reports
        without failing."""
        self.prefix = prefix
        self.probe = probe
        self.advisory = advisory
        self._by_name: dict[str, Freshness] = {}

    def add(self, name: str, bound: float, clock: Callable[[], float] = time.monotonic) -> Freshness:
        """A new source (replacing one of the same name: a component built again)."""
        source = Freshness(name, bound, clock, name.partition("/")[0] not in self.advisory, self.probe)
        self._by_name[name] = source
        return source

    def __iter__(self) -> Iterator[Freshness]:
        return iter(list(self._by_name.values()))

    def collect(self) -> Iterable[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        last = GaugeMetricFamily(
            f"{self.prefix}_source_last_success_timestamp_seconds",
            "When a background source (discovery, object cache, authentication ConfigMap, watched files) last "
            "succeeded.",
            labels=["source"],
        )
        stale = GaugeMetricFamily(
            f"{self.prefix}_source_stale",
            f"1 while a background source has been failing for longer than its bound (then {self.probe} fails, unless "
            "its check is advisory), else 0.",
            labels=["source"],
        )
        for source in self:
            if source.last_success is not None:
                last.add_metric([source.name], source.last_success)
            stale.add_metric([source.name], float(source.stale()))
        yield last
        yield stale
