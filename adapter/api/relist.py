"""What one relist finds: per rule, the series names its backend has with samples in the window, and the label names
those series carry.

Each rule is listed in its own backend (``backend`` key, ``config/backends.py``); a list asked by several rules of
one backend is asked once. A backend that cannot answer costs only the findings of its own rules: they keep what
the last relist of the same rules found, and the failure is named in ``Listed.errors``. Once one of a backend's
listings has failed, its others are not sent, so a backend that hangs costs one timeout per relist, and each
backend has its own few requests at a time, so it cannot hold up another.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from adapter.backends.prometheus import LABEL_VALUES_LIMIT, PrometheusAPI
from adapter.backends.prometheus_answer import SeriesShapes
from adapter.backends.prometheus_backends import Backends
from adapter.config.rules import Rule, RuleSet
from adapter.errors import PrometheusError
from adapter.single_flight import SingleFlightCache

log = logging.getLogger(__name__)

MAX_NAMES_PER_LIST = LABEL_VALUES_LIMIT - 1  # the client asks for one more, to tell a list cut at the limit
PARALLEL_REQUESTS = 4  # per backend
T = TypeVar("T")


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

    async def series(self, backend: str, match: str) -> SeriesShapes:
        async def call() -> SeriesShapes:
            return await self._ask(backend, lambda api: api.series(match, self.start, self.end))

        shapes, _ = await self._series.get((backend, match), call)
        return shapes

    async def rule(self, rule: Rule) -> SeriesShapes:
        """The series of ``rule`` with samples in the window: directly when it pins one name, else one listing per
        name the label values give and the rule accepts (the label values may name series long gone)."""
        query, backend = rule.series_query, rule.backend
        if query.literal_name() is not None:
            return await self.series(backend, str(query))
        names = [n for n in await self.names(backend, str(query)) if rule.accepts(n) and rule.api_name(n)]
        found = await asyncio.gather(
            *(self.series(backend, query.with_matchers([("__name__", "=", n)])) for n in names)
        )
        return {series: sets for shapes in found for series, sets in shapes.items()}

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

    async def listed(rule: Rule, last: SeriesShapes | None) -> SeriesShapes:
        try:
            return await lister.rule(rule)
        except PrometheusError:
            return last or {}

    try:
        custom = await asyncio.gather(*(listed(r, kept.custom[i] if kept else None) for i, r in enumerate(rules.rules)))
        external = await asyncio.gather(
            *(listed(r, kept.external[i] if kept else None) for i, r in enumerate(rules.external_rules))
        )
    finally:
        lister.cancel()
    used = {r.backend for r in (*rules.rules, *rules.external_rules)}
    if used and used <= lister.failed.keys():
        raise next(iter(lister.failed.values()))
    errors = {name: str(e) for name, e in sorted(lister.failed.items())}
    return Listed(rules, tuple(custom), tuple(external), end, errors)
