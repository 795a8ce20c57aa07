"""What one relist finds: per rule, the series names its backend has with samples in the window, and the label names
those series carry.

Each rule is listed in its own backend (``backend`` key, ``backends/backend_specs.py``); a list asked by several
rules of one backend is asked once. A backend that cannot answer costs only the findings of its own rules: they keep
what the last relist of the same rules found, and the failure is named in ``Listed.errors``. Once one of a backend's
listings has failed, its others are not sent, so a backend that hangs costs one timeout per relist, and each
backend has its own few requests at a time, so it cannot hold up another.

Rules that list one series name with different presence matchers (``pod!=""``, ``exported_pod=""``; the built-in
rules list each DCGM field three to five ways) share one listing of the name without them, and each keeps the series
its matchers select: a series listing carries each series' label names, which is all such a matcher tests. For
the built-in rules that is 6 listings of the DCGM fields a relist instead of 30, of which 18 held every GPU's series
(some 4 MB each at 16,000 GPUs).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from adapter.backends.prometheus import LABEL_VALUES_LIMIT, PrometheusAPI
from adapter.backends.prometheus_answer import SeriesShapes
from adapter.backends.prometheus_backends import Backends
from adapter.config.rules import Rule, RuleSet
from adapter.errors import PrometheusError
from adapter.query.promql import SeriesSelector
from adapter.single_flight import SingleFlightCache

log = logging.getLogger(__name__)

MAX_NAMES_PER_LIST = LABEL_VALUES_LIMIT - 1  # the client asks for one more, to tell a list cut at the limit
PARALLEL_REQUESTS = 4  # per backend
T = TypeVar("T")
_PRESENCE = {("!=", ""): True, ("=", ""): False}  # a matcher that tests only whether a series has the label


@dataclass(frozen=True)
class Listed:
    """What one relist found for ``rules``: per rule, in order, each series name with the label names of its series;
    ``errors``: the backends that could not answer (their rules' findings are the last relist's), by name."""

    rules: RuleSet
    custom: tuple[SeriesShapes, ...]
    external: tuple[SeriesShapes, ...]
    at: float
    errors: Mapping[str, str] = field(default_factory=dict)


class _Lister:
    """The backends' lists for one relist, each asked once however many rules share it."""

    def __init__(self, backends: Backends, start: float, end: float) -> None:
        self.backends = backends
        self.start, self.end = start, end
        self.failed: dict[str, PrometheusError] = {}
        self._semaphores = {name: asyncio.Semaphore(PARALLEL_REQUESTS) for name in backends}
        # for this relist
        self._names: SingleFlightCache[tuple[str, str], list[str]] = SingleFlightCache(math.inf)
        self._series: SingleFlightCache[tuple[str, str], SeriesShapes] = SingleFlightCache(math.inf)
        self._shared: set[tuple[str, str]] = set()  # (backend, listing) asked once for several rules

    async def _ask(self, backend: str, call: Callable[[PrometheusAPI], Awaitable[T]]) -> T:
        async with self._semaphores[backend]:
            if backend in self.failed:
                raise self.failed[backend]
            try:
                return await call(self.backends[backend])
            except PrometheusError as e:
                self.failed.setdefault(backend, e)
                raise

    async def names(self, backend: str, match: str) -> list[str]:
        async def call() -> list[str]:
            return await self._ask(backend, lambda api: api.label_values("__name__", match, self.start, self.end))

        names, _ = await self._names.get((backend, match), call)
        if len(names) > MAX_NAMES_PER_LIST:
            log.warning(
                "more than %d metric names match %s; serving the first %d",
                MAX_NAMES_PER_LIST,
                match,
                MAX_NAMES_PER_LIST,
            )
            return sorted(names)[:MAX_NAMES_PER_LIST]
        return names

    async def _listing(self, backend: str, match: str) -> SeriesShapes:
        async def call() -> SeriesShapes:
            return await self._ask(backend, lambda api: api.series(match, self.start, self.end))

        shapes, _ = await self._series.get((backend, match), call)
        return shapes

    async def selectors(self, rule: Rule) -> list[SeriesSelector]:
        """What ``rule`` lists: its query when it pins one name, once per name when it pins several
        (``__name__=~"a|b"``), else once per name the label values give and the rule accepts (the label values may
        name series long gone, which their listing leaves out)."""
        query, backend = rule.series_query, rule.backend
        pinned = query.literal_names()
        if len(pinned) == 1:
            return [query]
        if pinned:
            return [query.pinned_to(n) for n in pinned if rule.accepts(n) and rule.api_name(n)]
        names = [n for n in await self.names(backend, str(query)) if rule.accepts(n) and rule.api_name(n)]
        return [SeriesSelector(query.name, (*query.matchers, ("__name__", "=", n))) for n in names]

    def share(self, wanted: Iterable[tuple[str, SeriesSelector]]) -> None:
        """Plan the relist's listings: a name listed with two or more sets of presence matchers is listed once."""
        ways: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        for backend, selector in wanted:
            base, _ = _presence(selector)
            if base is not None:
                ways[(backend, str(base))].add(str(selector))
        self._shared = {key for key, selectors in ways.items() if len(selectors) > 1}

    async def series(self, backend: str, selector: SeriesSelector) -> SeriesShapes:
        """The series ``selector`` selects, from its own listing or from the shared one of its name."""
        base, presence = _presence(selector)
        if base is None or (backend, str(base)) not in self._shared:
            return await self._listing(backend, str(selector))
        shapes = await self._listing(backend, str(base))
        having = {
            name: frozenset(s for s in sets if all((label in s) == present for label, present in presence))
            for name, sets in shapes.items()
        }
        return {name: sets for name, sets in having.items() if sets}

    def cancel(self) -> None:
        self._names.cancel()
        self._series.cancel()


async def list_series(
    rules: RuleSet, prometheus: PrometheusAPI | Backends, start: float, end: float, before: Listed | None = None
) -> Listed:
    """One relist's findings, keeping ``before``'s (the last relist's) for the rules of a backend that cannot
    answer; raises ``PrometheusError`` when none of the backends the rules use answered."""
    lister = _Lister(Backends.of(prometheus), start, end)
    kept = before if before is not None and before.rules is rules else None
    every = (*rules.rules, *rules.external_rules)
    lasts: list[SeriesShapes | None] = [*kept.custom, *kept.external] if kept else [None] * len(every)

    async def selectors(rule: Rule) -> list[SeriesSelector] | None:
        try:
            return await lister.selectors(rule)
        except PrometheusError:
            return None

    async def listed(rule: Rule, selected: Sequence[SeriesSelector] | None, last: SeriesShapes | None) -> SeriesShapes:
        if selected is None:
            return last or {}
        try:
            found = await asyncio.gather(*(lister.series(rule.backend, s) for s in selected))
        except PrometheusError:
            return last or {}
        return {series: sets for shapes in found for series, sets in shapes.items()}

    try:
        chosen = await asyncio.gather(*(selectors(r) for r in every))
        lister.share((r.backend, s) for r, selected in zip(every, chosen, strict=True) for s in selected or ())
        found = await asyncio.gather(*(listed(*args) for args in zip(every, chosen, lasts, strict=True)))
    finally:
        lister.cancel()
    used = {r.backend for r in every}
    if used and used <= lister.failed.keys():
        raise next(iter(lister.failed.values()))
    errors = {name: str(e) for name, e in sorted(lister.failed.items())}
    custom = len(rules.rules)
    return Listed(rules, tuple(found[:custom]), tuple(found[custom:]), end, errors)


def _presence(selector: SeriesSelector) -> tuple[SeriesSelector | None, tuple[tuple[str, bool], ...]]:
    """``selector`` without its presence matchers, and what they require (label, present); no selector when it
    does not pin a series name, as a listing of all names would cost more than the listings it replaces."""
    if selector.literal_name() is None:
        return None, ()
    presence, rest = [], []
    for label, op, value in selector.matchers:
        if label != "__name__" and (op, value) in _PRESENCE:
            presence.append((label, _PRESENCE[(op, value)]))
        else:
            rest.append((label, op, value))
    return SeriesSelector(selector.name, tuple(rest)), tuple(presence)
