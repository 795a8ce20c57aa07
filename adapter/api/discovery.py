"""Which metrics exist: a background relist of series *names* from Prometheus, answered from memory.

prometheus-adapter lists every series (``/api/v1/series``) and keeps them all, which users measure in GiB. Here each
rule asks for the label names its series carry (``/api/v1/labels?match[]=``) and, per resource label, the metric
names that carry it (``/api/v1/label/__name__/values?match[]=``). Memory then grows with the number of metric names,
not series. A failed relist keeps the last good catalog. Rules that pin their series and resources (the built-in GPU
rules do) are in the catalog before the first relist and stay there when Prometheus has none of their series yet.
The relist is a source (``freshness.py``): ``/readyz`` fails once relists have failed for max(60 s, 2 intervals).
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace

from adapter.backends.prometheus import PrometheusAPI
from adapter.config.rules import Rule, RuleSet
from adapter.config.rules_file import RulesFile
from adapter.errors import PrometheusError
from adapter.freshness import DEFAULT_TIMING, Timing
from adapter.naming.resources import GroupResource, ResourceInfo
from adapter.self_metrics import AdapterMetrics
from adapter.single_flight import SingleFlightCache

log = logging.getLogger(__name__)

MAX_NAMES_PER_LIST = 10_000
PARALLEL_REQUESTS = 4


@dataclass(frozen=True, slots=True)
class MetricSource:
    """One rule and one Prometheus series that together answer a metric."""

    rule: Rule
    series: str


@dataclass(frozen=True)
class CustomMetric:
    name: str
    info: ResourceInfo
    sources: tuple[MetricSource, ...]
    discovered: bool


@dataclass(frozen=True)
class ExternalMetric:
    name: str
    sources: tuple[MetricSource, ...]
    discovered: bool


@dataclass(frozen=True)
class Catalog:
    rules: RuleSet
    custom: Mapping[tuple[str, GroupResource], CustomMetric] = field(default_factory=dict)
    external: Mapping[str, ExternalMetric] = field(default_factory=dict)
    relisted_at: float | None = None
    error: str | None = None

    def custom_metric(self, name: str, gr: GroupResource) -> CustomMetric | None:
        return self.custom.get((name, gr))

    def external_metric(self, name: str) -> ExternalMetric | None:
        """External metric names match case-insensitively: the HPA lowercases them."""
        return self.external.get(name.lower())

    def resources_of(self, name: str) -> list[GroupResource]:
        return sorted(gr for n, gr in self.custom if n == name)

    def similar(self, name: str) -> list[str]:
        names = {n for n, _ in self.custom} | {m.name for m in self.external.values()}
        return difflib.get_close_matches(name, sorted(names), n=5, cutoff=0.6)


_Found = dict[tuple[str, GroupResource], tuple[ResourceInfo, list[MetricSource]]]
_FoundExternal = dict[str, tuple[str, list[MetricSource]]]


def build_catalog(
    rules: RuleSet,
    found: _Found | None = None,
    found_external: _FoundExternal | None = None,
    relisted_at: float | None = None,
) -> Catalog:
    """Discovered metrics, plus the declared ones discovery did not find (with their declared sources)."""
    declared: _Found = {}
    declared_external: _FoundExternal = {}
    for rule in rules.rules:
        d = rule.declared()
        if d:
            series, name, infos = d
            for info in infos:
                declared.setdefault((name, info.group_resource), (info, []))[1].append(MetricSource(rule, series))
    for rule in rules.external_rules:
        d = rule.declared()
        if d:
            series, name, _ = d
            declared_external.setdefault(name.lower(), (name, []))[1].append(MetricSource(rule, series))
    found = found or {}
    found_external = found_external or {}
    custom = {}
    for key in declared.keys() | found.keys():
        info, sources = found[key] if key in found else declared[key]
        custom[key] = CustomMetric(key[0], info, tuple(dict.fromkeys(sources)), key in found)
    external = {}
    for lower in declared_external.keys() | found_external.keys():
        name, sources = found_external[lower] if lower in found_external else declared_external[lower]
        external[lower] = ExternalMetric(name, tuple(dict.fromkeys(sources)), lower in found_external)
    return Catalog(rules, custom, external, relisted_at)


class _Lister:
    """Prometheus's label and name lists for one relist, each asked once however many rules share it."""

    def __init__(self, prometheus: PrometheusAPI, start: float, end: float) -> None:
        self.prometheus = prometheus
        self.start, self.end = start, end
        self._semaphore = asyncio.Semaphore(PARALLEL_REQUESTS)
        self._lists: SingleFlightCache[tuple[str, str], list[str]] = SingleFlightCache(math.inf)  # for this relist

    async def _once(self, key: tuple[str, str], call: Callable[[], Awaitable[list[str]]]) -> list[str]:
        async def limited() -> list[str]:
            async with self._semaphore:
                return await call()

        names, _ = await self._lists.get(key, limited)
        return names

    async def labels(self, match: str) -> list[str]:
        return await self._once(("labels", match), lambda: self.prometheus.label_names(match, self.start, self.end))

    async def names(self, match: str) -> list[str]:
        names = await self._once(
            ("names", match), lambda: self.prometheus.label_values("__name__", match, self.start, self.end)
        )
        if len(names) > MAX_NAMES_PER_LIST:
            log.warning("%d metric names match %s; serving the first %d", len(names), match, MAX_NAMES_PER_LIST)
            return sorted(names)[:MAX_NAMES_PER_LIST]
        return names

    def cancel(self) -> None:
        self._lists.cancel()


async def _custom_rule(rule: Rule, lister: _Lister) -> list[tuple[str, ResourceInfo, MetricSource]]:
    labels = await lister.labels(str(rule.series_query))
    ns_label = rule.namespace_label
    out = []
    for label in labels:
        info = rule.resource_for_label(label)
        if info is None:
            continue
        extra = [(label, "!=", "")]
        if info.namespaced:
            if ns_label is None or ns_label not in labels:
                log.debug("%s: %s series carry no namespace label; skipped", rule.where, info.group_resource)
                continue
            extra.append((ns_label, "!=", ""))
        for series in await lister.names(rule.series_query.with_matchers(extra)):
            name = rule.api_name(series) if rule.accepts(series) else None
            if name:
                out.append((name, info, MetricSource(rule, series)))
    return out


async def _external_rule(rule: Rule, lister: _Lister) -> list[tuple[str, MetricSource]]:
    out = []
    for series in await lister.names(str(rule.series_query)):
        name = rule.api_name(series) if rule.accepts(series) else None
        if name:
            out.append((name, MetricSource(rule, series)))
    return out


async def discover(rules: RuleSet, prometheus: PrometheusAPI, start: float, end: float) -> Catalog:
    """One relist; raises ``PrometheusError`` when Prometheus cannot answer it."""
    lister = _Lister(prometheus, start, end)
    try:
        custom = await asyncio.gather(*(_custom_rule(r, lister) for r in rules.rules))
        external = await asyncio.gather(*(_external_rule(r, lister) for r in rules.external_rules))
    finally:
        lister.cancel()
    found: _Found = {}
    for per_rule in custom:
        for name, info, source in per_rule:
            found.setdefault((name, info.group_resource), (info, []))[1].append(source)
    found_external: _FoundExternal = {}
    for per_rule_external in external:
        for name, source in per_rule_external:
            found_external.setdefault(name.lower(), (name, []))[1].append(source)
    return build_catalog(rules, found, found_external, relisted_at=end)


class Discovery:
    """Holds the catalog and relists it in the background."""

    def __init__(
        self,
        rules_file: RulesFile,
        prometheus: PrometheusAPI,
        metrics: AdapterMetrics,
        interval: float,
        max_age: float,
        clock: Callable[[], float] = time.time,
        timing: Timing = DEFAULT_TIMING,
    ) -> None:
        self.rules_file = rules_file
        self.prometheus = prometheus
        self.metrics = metrics
        self.interval = interval
        self.max_age = max_age
        self.clock = clock
        self.attempted = False
        self.source = metrics.sources.add("discovery", timing.bound(interval))
        self._catalog = build_catalog(rules_file.rules)
        self._wake = asyncio.Event()
        self._relisted_at: float | None = None  # time.monotonic() when the last relist ended

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    async def relist(self) -> None:
        """Relist once; on failure keep the last good catalog and record why."""
        rules = self.rules_file.rules
        now = self.clock()
        try:
            catalog = await discover(rules, self.prometheus, now - self.max_age, now)
        except PrometheusError as e:
            self.metrics.discovery_runs.labels("error").inc()
            log.warning("relist failed, serving the metrics found before: %s", e)
            base = self._catalog if self._catalog.rules is rules else build_catalog(rules)
            self._catalog = replace(base, error=str(e))
            self.source.failed(str(e))
        else:
            self._catalog = catalog
            self.metrics.discovery_runs.labels("success").inc()
            self.metrics.discovery_last_success.set(now)
            self.source.succeeded()
        finally:
            self.attempted = True
        self._relisted_at = time.monotonic()
        self.metrics.discovered_metrics.labels("custom").set(len(self._catalog.custom))
        self.metrics.discovered_metrics.labels("external").set(len(self._catalog.external))

    def wake(self) -> None:
        """Relist now (the rules changed)."""
        self._wake.set()

    async def run(self) -> None:
        """Relist every interval, forever; the first one is due an interval after the last relist (at once if
        none ended: never started, or stopped halfway)."""
        if self._relisted_at is not None:
            await self._sleep(self._relisted_at + self.interval - time.monotonic())
        while True:
            await self.relist()
            await self._sleep(self.interval)

    async def _sleep(self, seconds: float) -> None:
        """Until the next relist is due, or ``wake``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), max(seconds, 0.0))
        self._wake.clear()
