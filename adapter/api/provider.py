"""Answers to metric requests as Kubernetes objects: catalog → objects → PromQL → Prometheus → values.

No HTTP here and no PromQL text: the provider strings together the catalog (which rules answer a metric), the object
lister (which objects a wildcard covers), query building and the query cache. It records what it did in an optional
``Trace``, which the explain endpoint and command show.
"""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

from cachetools import LRUCache, TTLCache

from adapter.api.discovery import Catalog, CustomMetric, MetricSource
from adapter.api.objects import ExternalValue, MetricValue, MetricValues, ObjectRef, ResourceEntry
from adapter.api.paths import CUSTOM_GROUP, EXTERNAL_GROUP, CustomRequest, ExternalRequest
from adapter.backends.kube_cache import Listing, ObjectLister
from adapter.backends.prometheus import PrometheusAPI, QueryResult, Sample
from adapter.errors import AdapterError, NotConfigured, NotFound
from adapter.naming import resources
from adapter.naming.resources import ResourceInfo
from adapter.query.promql import window_seconds
from adapter.query.quantity import format_quantity, parse_sample_value
from adapter.query.queries import custom_query, external_query
from adapter.query.selectors import Selector
from adapter.self_metrics import AdapterMetrics
from adapter.single_flight import SingleFlightCache

log = logging.getLogger(__name__)

# The window reported for instant queries (no range selector): the HPA does not use it, and a minute is what
# dashboards and prometheus-adapter users read an instant GPU gauge as.
DEFAULT_WINDOW_SECONDS = 60
_DROP_LOG_EVERY = 60.0
# memos are bounded by what they hold, not by entries: a 10,000-pod answer weighs as much as 10,000 small ones
MEMO_ITEMS = 50_000
MEMO_QUERY_CHARS = 4_000_000


@dataclass
class QueryRecord:
    source: MetricSource
    promql: str
    cache: str = ""
    result: QueryResult | None = None
    error: str = ""
    kept: list[str] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Trace:
    """What a request went through, for explain."""

    listing: Listing | None = None
    names: list[str] | None = None
    label: str = ""
    queries: list[QueryRecord] = field(default_factory=list)


@functools.lru_cache(maxsize=4096)
def _quantity(text: str) -> str:
    return format_quantity(parse_sample_value(text))


@functools.lru_cache(maxsize=1024)
def _window(template_text: str) -> int:
    return window_seconds(template_text) or DEFAULT_WINDOW_SECONDS


class Provider:
    def __init__(
        self,
        catalog: Callable[[], Catalog],
        prometheus: PrometheusAPI,
        objects: ObjectLister,
        cache: SingleFlightCache[str, QueryResult],
        metrics: AdapterMetrics,
    ) -> None:
        self.catalog = catalog
        self.prometheus = prometheus
        self.objects = objects
        self.cache = cache
        self.metrics = metrics
        # one log line per metric and object a minute: a NaN (a division by zero) tends to repeat every request
        self._dropped_logged: TTLCache[tuple[str, str], bool] = TTLCache(10_000, _DROP_LOG_EVERY)
        self._queries: LRUCache[tuple[object, ...], str] = LRUCache(MEMO_QUERY_CHARS, getsizeof=len)
        # the last answer to each request, with what it was computed from (the object names and the query
        # results, both shared objects that are replaced, never changed, when anything changes)
        self._answers: LRUCache[CustomRequest, tuple[tuple[object, ...], MetricValues]] = LRUCache(
            MEMO_ITEMS, getsizeof=lambda answer: len(answer[1]) + 1
        )

    def resource_entries(self, group: str) -> list[ResourceEntry]:
        """The APIResourceList lines of a group, from memory; never raises."""
        catalog = self.catalog()
        if group == CUSTOM_GROUP:
            return sorted(ResourceEntry(f"{gr}/{name}", m.info.namespaced) for (name, gr), m in catalog.custom.items())
        return sorted(ResourceEntry(m.name, True) for m in catalog.external.values())

    def served_groups(self) -> list[str]:
        rules = self.catalog().rules
        groups = [CUSTOM_GROUP] if rules.rules else []
        return groups + ([EXTERNAL_GROUP] if rules.external_rules else [])

    def _served(self, req: CustomRequest) -> tuple[ResourceInfo, CustomMetric]:
        """The resource and metric a request names; NotFound, saying why, when this adapter serves no such thing."""
        gr = req.resource
        info = resources.lookup(gr.resource, gr.group)
        metric = self.catalog().custom_metric(req.metric, info.group_resource) if info else None
        if info is None or metric is None:
            raise NotFound(f"the server could not find the metric {req.metric} for {gr}")
        if info.namespaced and req.namespace is None:
            raise NotFound(
                f"the server could not find the metric {req.metric} for {gr} outside a namespace: "
                f"{gr} are namespaced; ask under /namespaces/<namespace>/{gr}/"
            )
        if not info.namespaced and req.namespace is not None:
            raise NotFound(f"the server could not find the metric {req.metric} for {gr}: {gr} are not namespaced")
        return info, metric

    async def _names(self, req: CustomRequest, info: ResourceInfo, trace: Trace | None) -> list[str] | None:
        """The objects the request covers: its one object, or those its selector matches (None: every object)."""
        if req.name is not None:
            return [req.name]
        listing = await self.objects.names(info, req.namespace, req.label_selector)
        if trace:
            trace.listing = listing
        if listing.names is None and req.label_selector:
            raise NotConfigured(
                "labelSelector needs object labels from the Kubernetes API, and this adapter runs without one "
                "(give it --lister-kubeconfig, or run it in a cluster)"
            )
        return listing.names

    async def custom(self, req: CustomRequest, trace: Trace | None = None) -> MetricValues:
        info, metric = self._served(req)
        names = await self._names(req, info, trace)
        if trace:
            trace.names = names
        if names == []:
            return MetricValues()
        wanted = set(names) if names is not None else None
        namespace = req.namespace if info.namespaced else None
        # each object is answered by the first source (rule) with a sample for it, finite or not
        owner: dict[str, int] = {}

        def claim(index: int, source: MetricSource, result: QueryResult) -> bool:
            label = source.rule.label_for(info) or ""
            for sample in result.samples:
                name = sample.labels.get(label)
                if name and (wanted is None or name in wanted) and name not in owner:
                    owner[name] = index
            return wanted is not None and len(owner) >= len(wanted)

        def query(source: MetricSource) -> str:
            return self._custom_query(source, info, namespace, names, req.metric_selector)

        used = await self._fetch(metric.sources, query, claim, trace)
        # a listed answer depends on the listing too (the watch cache hands out one list per state of the objects)
        depends_on = (names if req.name is None else None, *(result for _, result, _ in used))
        if trace is None:
            memo = self._answers.get(req)
            if memo is not None and len(memo[0]) == len(depends_on) and all(map(operator.is_, memo[0], depends_on)):
                return memo[1]
        items = self._convert(req, info, namespace, used, owner)
        if req.name is not None and not items:
            where = f" in namespace {namespace}" if namespace else ""
            raise NotFound(f"the server could not find the metric {req.metric} for {req.resource} {req.name}{where}")
        if trace is None and len(items) < MEMO_ITEMS:
            self._answers[req] = (depends_on, items)
        return items

    def _custom_query(
        self,
        source: MetricSource,
        info: ResourceInfo,
        namespace: str | None,
        names: list[str] | None,
        selector: Selector,
    ) -> str:
        key = (source, info.group_resource, namespace, None if names is None else tuple(names), selector)
        query = self._queries.get(key)
        if query is None:
            query = custom_query(source.rule, source.series, info, namespace, names, selector)
            if len(query) < MEMO_QUERY_CHARS:
                self._queries[key] = query
        return query

    def _convert(
        self,
        req: CustomRequest,
        info: ResourceInfo,
        namespace: str | None,
        used: list[tuple[MetricSource, QueryResult, QueryRecord | None]],
        owner: dict[str, int],
    ) -> MetricValues:
        selector = req.metric_selector.to_label_selector()
        kind, api_version, metric = info.kind, info.api_version, req.metric
        found: dict[str, MetricValue] = {}
        for index, (source, result, record) in enumerate(used):
            label = source.rule.label_for(info) or ""
            window = _window(source.rule.metrics_query.text)
            for sample in result.samples:
                name = sample.labels.get(label)
                if name is None or owner.get(name) != index:
                    continue
                # the owner answered: later samples for the name (a metricsQuery without aggregation) are ignored
                owner[name] = -1
                try:
                    value = _quantity(sample.value)
                except ValueError:
                    self._drop(sample, metric, name, record)
                    continue
                ref = ObjectRef(kind, namespace, name, api_version)
                found[name] = MetricValue(ref, metric, selector, sample.timestamp, window, value)
                if record:
                    record.kept.append(name)
        return MetricValues(found[n] for n in sorted(found))

    async def external(self, req: ExternalRequest, trace: Trace | None = None) -> list[ExternalValue]:
        metric = self.catalog().external_metric(req.metric)
        if metric is None:
            raise NotFound(f"the server could not find the external metric {req.metric}")
        out: list[ExternalValue] = []

        def query(source: MetricSource) -> str:
            return external_query(source.rule, source.series, req.namespace, req.metric_selector)

        def answered(index: int, source: MetricSource, result: QueryResult) -> bool:
            return bool(result.samples)

        # several rules exposing one external name would be summed twice by the HPA: the first that answers wins
        used = await self._fetch(metric.sources, query, answered, trace)
        for _, result, record in used[-1:]:
            for sample in result.samples:
                labels = {k: v for k, v in sample.labels.items() if k != "__name__"}
                shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
                value = self._value(sample, req.metric, shown, record)
                if value is not None:
                    out.append(ExternalValue(req.metric, labels, sample.timestamp, value))
                    if record:
                        record.kept.append(shown)
        return sorted(out, key=lambda v: sorted(v.labels.items()))

    async def _fetch(
        self,
        sources: tuple[MetricSource, ...],
        query: Callable[[MetricSource], str],
        claim: Callable[[int, MetricSource, QueryResult], bool],
        trace: Trace | None,
    ) -> list[tuple[MetricSource, QueryResult, QueryRecord | None]]:
        """Query each source in rule order until ``claim`` says every object is answered; a failing source costs
        only its own answers, unless every source fails."""
        used: list[tuple[MetricSource, QueryResult, QueryRecord | None]] = []
        failures: list[AdapterError] = []
        for source in sources:
            record = None
            try:
                promql = query(source)
                if trace:
                    record = QueryRecord(source, promql)
                    trace.queries.append(record)
                result, outcome = await self.cache.get(promql, functools.partial(self.prometheus.query, promql))
            except AdapterError as e:
                if record:
                    record.error = str(e)
                log.warning("%s (series %s): %s", source.rule.where, source.series, e)
                failures.append(e)
                continue
            if record:
                record.cache, record.result = outcome, result
            used.append((source, result, record))
            if claim(len(used) - 1, source, result):
                break
        if failures and len(failures) == len(sources):
            raise failures[0]
        return used

    def _value(self, sample: Sample, metric: str, name: str, record: QueryRecord | None) -> str | None:
        try:
            return _quantity(sample.value)
        except ValueError:
            self._drop(sample, metric, name, record)
            return None

    def _drop(self, sample: Sample, metric: str, name: str, record: QueryRecord | None) -> None:
        """Count and log a sample without a quantity form (NaN, ±Inf)."""
        lowered = sample.value.lower()
        reason = "nan" if lowered == "nan" else "inf" if "inf" in lowered else "invalid"
        self.metrics.dropped_samples.labels(reason).inc()
        if record:
            record.dropped.append((name, sample.value))
        if (metric, name) not in self._dropped_logged:
            self._dropped_logged[(metric, name)] = True
            log.warning("dropped %s = %s for %s: not a finite number", metric, sample.value, name)
