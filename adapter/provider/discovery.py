"""Which metrics exist: a background relist of Prometheus's series, answered from memory.

Each relist asks, per rule, which series the rule's ``seriesQuery`` selects with samples in the last
``--metrics-max-age`` (``/api/v1/series`` with ``start``) in the rule's backend (``relist.py``), as prometheus-adapter
does: a series that stops being written leaves the catalog once its last sample is older than that. The label APIs
cannot say this (they filter by time only per storage block, hours long), so they only name the candidates: a rule
that does not pin its series names (one, or an alternation of plain names such as
``__name__=~"vllm:num_requests_waiting|tgi_queue_size"``) gets its names from ``/api/v1/label/__name__/values``, and
then one series listing per name the rule accepts, so that each answer is bounded by one metric's series. The answers
are reduced as they are read to series names and the label names they carry; the catalog keeps metric names, never
series.

Which labels name which resources is decided with the REST mapping (``naming/resources.py``): when the mapping
changes (a CRD installed, a refresh after a request for an unknown resource), the catalog is built again from the
last relist's findings, without asking Prometheus. A failed relist keeps the last good findings (of a backend that
failed, when others answered). Rules that pin their series and resources (the built-in GPU and inference rules do)
are in the catalog before the first relist and stay there when Prometheus has none of their series yet. The relist
is a source (``common/freshness.py``), reported but never failing ``/readyz``.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from adapter.backends.prometheus import PrometheusAPI
from adapter.backends.prometheus_answer import SeriesShapes
from adapter.backends.prometheus_backends import Backends
from adapter.config.rules import Rule, RuleSet
from adapter.config.rules_file import RulesFile
from adapter.errors import PrometheusError
from adapter.naming.resources import BUILT_IN, GroupResource, ResourceInfo, RestMapping
from adapter.provider.relist import Listed, list_series
from adapter.self_metrics import AdapterMetrics
from common.freshness import DEFAULT_TIMING, Timing

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MetricSource:
    """One rule and one Prometheus series that together answer a metric; for a custom metric, ``label`` is the
    series label that names the objects."""

    rule: Rule
    series: str
    label: str = ""


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
    mapping: RestMapping = BUILT_IN
    custom: Mapping[tuple[str, GroupResource], CustomMetric] = field(default_factory=dict)
    external: Mapping[str, ExternalMetric] = field(default_factory=dict)
    relisted_at: float | None = None
    error: str | None = None

    def resource(self, gr: GroupResource) -> ResourceInfo | None:
        """The resource a request names (``deployments.apps``, ``deployment``, ``pods``), by the REST mapping."""
        return self.mapping.lookup(gr.resource, gr.group)

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


def _custom_metrics(
    rule: Rule, shapes: SeriesShapes, mapping: RestMapping
) -> Iterator[tuple[str, ResourceInfo, MetricSource]]:
    """The metrics a rule's series give: each label that names a resource, once per series name and resource; a
    namespaced resource only from series that carry the namespace label too."""
    ns_label = rule.namespace_label
    resolved: dict[str, ResourceInfo | None] = {}
    for series in sorted(shapes):
        name = rule.api_name(series) if rule.accepts(series) else None
        if not name:
            continue
        seen: set[GroupResource] = set()
        for labels in shapes[series]:
            for label in sorted(labels):
                if label not in resolved:
                    resolved[label] = rule.resource_for_label(label, mapping)
                info = resolved[label]
                if info is None or info.group_resource in seen:
                    continue
                if info.namespaced and (ns_label is None or ns_label not in labels):
                    continue
                seen.add(info.group_resource)
                # the label the rule names the resource by, as queries use it, when these series carry it
                canonical = rule.label_for(info, mapping)
                yield name, info, MetricSource(rule, series, canonical if canonical and canonical in labels else label)


def build_catalog(
    rules: RuleSet,
    mapping: RestMapping = BUILT_IN,
    listed: Listed | None = None,
    error: str | None = None,
) -> Catalog:
    """Discovered metrics, plus the declared ones discovery did not find (with their declared sources)."""
    declared: _Found = {}
    declared_external: _FoundExternal = {}
    for rule in rules.rules:
        for series, name, pairs in rule.declared(mapping):
            for label, info in pairs:
                source = MetricSource(rule, series, label)
                declared.setdefault((name, info.group_resource), (info, []))[1].append(source)
    for rule in rules.external_rules:
        for series, name, _ in rule.declared(mapping):
            declared_external.setdefault(name.lower(), (name, []))[1].append(MetricSource(rule, series))
    found: _Found = {}
    found_external: _FoundExternal = {}
    if listed is not None and listed.rules is rules:
        for rule, shapes in zip(rules.rules, listed.custom, strict=True):
            for name, info, source in _custom_metrics(rule, shapes, mapping):
                found.setdefault((name, info.group_resource), (info, []))[1].append(source)
        for rule, shapes in zip(rules.external_rules, listed.external, strict=True):
            for series in sorted(shapes):
                api_name = rule.api_name(series) if rule.accepts(series) else None
                if api_name:
                    found_external.setdefault(api_name.lower(), (api_name, []))[1].append(MetricSource(rule, series))
    custom = {}
    for key in declared.keys() | found.keys():
        info, sources = found[key] if key in found else declared[key]
        custom[key] = CustomMetric(key[0], info, tuple(dict.fromkeys(sources)), key in found)
    external = {}
    for lower in declared_external.keys() | found_external.keys():
        name, sources = found_external[lower] if lower in found_external else declared_external[lower]
        external[lower] = ExternalMetric(name, tuple(dict.fromkeys(sources)), lower in found_external)
    relisted_at = listed.at if listed is not None and listed.rules is rules else None
    return Catalog(rules, mapping, custom, external, relisted_at, error)


async def discover(
    rules: RuleSet, prometheus: PrometheusAPI | Backends, start: float, end: float, mapping: RestMapping = BUILT_IN
) -> Catalog:
    """One relist, as a catalog."""
    listed = await list_series(rules, prometheus, start, end)
    return build_catalog(rules, mapping, listed, "; ".join(listed.errors.values()) or None)


class Discovery:
    """Holds the catalog and relists it in the background; ``mapping`` gives the REST mapping in force."""

    def __init__(
        self,
        rules_file: RulesFile,
        prometheus: PrometheusAPI | Backends,
        metrics: AdapterMetrics,
        interval: float,
        max_age: float,
        mapping: Callable[[], RestMapping] = lambda: BUILT_IN,
        clock: Callable[[], float] = time.time,
        timing: Timing = DEFAULT_TIMING,
        trim: Callable[[], None] = lambda: None,
    ) -> None:
        self.rules_file = rules_file
        self.prometheus = prometheus
        self.metrics = metrics
        self.interval = interval
        self.max_age = max_age
        self.mapping = mapping
        self.clock = clock
        self.trim = trim
        self.attempted = False
        self.source = metrics.sources.add("discovery", timing.bound(interval))
        self._listed: Listed | None = None
        self._unresolved: set[tuple[str, str, GroupResource]] = set()  # overrides already said to resolve to nothing
        self._catalog = build_catalog(rules_file.rules, mapping())
        self._wake = asyncio.Event()
        self._relisted_at: float | None = None  # time.monotonic() when the last relist ended

    @property
    def catalog(self) -> Catalog:
        """The catalog; built again from the last relist's findings when the REST mapping changed since."""
        mapping = self.mapping()
        if self._catalog.mapping is not mapping:
            self._set(build_catalog(self._catalog.rules, mapping, self._listed, self._catalog.error))
        return self._catalog

    @property
    def empty(self) -> bool:
        """Whether the rules give no metric at all (then the metrics APIs list no resources)."""
        catalog = self.catalog
        return not catalog.custom and not catalog.external

    async def relist(self) -> None:
        """Relist once; on failure keep the last good findings and record why."""
        rules = self.rules_file.rules
        now = self.clock()
        was_empty = self.attempted and self.empty
        try:
            listed = await list_series(rules, self.prometheus, now - self.max_age, now, self._listed)
        except PrometheusError as e:
            self.metrics.discovery_runs.labels("error").inc()
            log.warning("relist failed, serving the metrics found before: %s", e)
            if self._listed is not None and self._listed.rules is not rules:
                self._listed = None  # found for rules no longer in force
            self._set(build_catalog(rules, self.mapping(), self._listed, str(e)))
            self.source.failed(str(e))
        else:
            self._listed = listed
            error = "; ".join(listed.errors.values()) or None
            self._set(build_catalog(rules, self.mapping(), listed, error))
            if error:
                self.metrics.discovery_runs.labels("error").inc()
                log.warning("relist failed in part, serving the metrics found before from what failed: %s", error)
                self.source.failed(error)
            else:
                self.metrics.discovery_runs.labels("success").inc()
                self.metrics.discovery_last_success.set(now)
                self.source.succeeded()
            if self.empty and not was_empty:
                log.warning(
                    "the rules (%s) matched no series with samples in the last %gs: the metrics APIs list no "
                    "metrics until some appear",
                    rules.source,
                    self.max_age,
                )
        finally:
            self.attempted = True
            # A relist's listings (megabytes each, decoded in worker threads) are the largest allocations the
            # adapter makes; glibc keeps what they freed in its arenas, and the process grew about 4 MB at some
            # relists and never shrank (16 cores, 8 minutes: 185 -> 197 MB). Trimming returns it: in a loop of
            # relists, 107 -> 122 MB without, flat at 85-90 MB with, at most 4 ms a call (without the GIL).
            self.trim()
        self._relisted_at = time.monotonic()

    def _set(self, catalog: Catalog) -> None:
        self._catalog = catalog
        rules = catalog.rules
        unresolved = {
            (rule.where, label, gr)
            for rule in (*rules.rules, *rules.external_rules)
            for label, gr in rule.mapper.overrides.items()
            if catalog.mapping.lookup(gr.resource, gr.group) is None
        }
        for where, label, gr in sorted(unresolved - self._unresolved):
            log.warning(
                "%s.resources.overrides.%s: %s is not a resource API discovery lists; its metrics are served once it "
                "is (a CRD installed later)",
                where,
                label,
                f"{gr.resource}.{gr.group}" if gr.group else gr.resource,
            )
        self._unresolved = unresolved
        self.metrics.discovered_metrics.labels("custom").set(len(catalog.custom))
        self.metrics.discovered_metrics.labels("external").set(len(catalog.external))

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
