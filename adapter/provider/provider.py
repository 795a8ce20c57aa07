"""Answers to metric requests as Kubernetes objects: catalog → objects → PromQL → Prometheus → values.

No HTTP here and no PromQL text: the provider strings together the catalog (which rules answer a metric), the object
lister (which objects a wildcard covers), query building and the query cache. It records what it did in an optional
``Trace``, which the explain endpoint and command show.
"""

from __future__ import annotations

import functools
import logging
import operator
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from cachetools import LRUCache, TTLCache

from adapter.api.objects import ExternalValue, MetricValue, MetricValues, ObjectRef, ResourceEntry
from adapter.api.paths import CUSTOM_GROUP, EXTERNAL_GROUP, RESOURCE_GROUP, CustomRequest, ExternalRequest
from adapter.backends.kube_cache import Listing, ObjectLister
from adapter.backends.prometheus import PrometheusAPI, QueryResult
from adapter.backends.prometheus_backends import Backends
from adapter.errors import AdapterError, NotConfigured, NotFinite, NotFound
from adapter.naming.resources import GroupResource, ResourceInfo
from adapter.provider.discovery import Catalog, CustomMetric, MetricSource
from adapter.provider.held_answers import HeldAnswers
from adapter.provider.queries import custom_query, external_query
from adapter.query.promql import window_seconds
from adapter.query.quantity import sample_quantity
from adapter.self_metrics import AdapterMetrics, HoldState
from adapter.single_flight import SingleFlightCache
from common.log_limit import LogLimit, left_out

log = logging.getLogger(__name__)

# The window reported for instant queries (no range selector): the HPA does not use it, and a minute is what
# dashboards and prometheus-adapter users read an instant GPU gauge as.
DEFAULT_WINDOW_SECONDS = 60
_DROP_LOG_EVERY = 60.0
# The answer memo is bounded by the bytes it holds (an item with its rendered JSON is about 600 bytes; a query's
# text one byte a character), not by entries: a 10,000-pod answer weighs as much as 10,000 small ones.
MEMO_BYTES = 32 * 1024 * 1024
ITEM_BYTES = 600


@dataclass
class QueryRecord:
    """One source's query in a request, as it went: recorded for every request, shown by explain."""

    source: MetricSource
    promql: str
    cache: str = ""
    result: QueryResult | None = None  # None too where it answered none of the objects asked, outside explain
    error: str = ""
    kept: list[str] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def backend(self) -> str:
        """The server the query went to: its rule's backend."""
        return self.source.rule.backend


@dataclass
class Trace:
    """What a request went through. Every request has one; explain passes its own to read it afterwards, even
    when the request failed, and its requests bypass the answer memo so that every step really runs."""

    listing: Listing | None = None
    names: list[str] | None = None
    queries: list[QueryRecord] = field(default_factory=list)
    # the answer was the question's last good one, given this many seconds before, Prometheus failing with
    # held_error (--backend-failure-hold)
    held_age: float | None = None
    held_error: str = ""


@dataclass(frozen=True)
class _Answer:
    """A custom-metrics answer with what it was computed from: the object names (the watch cache hands out one
    list per state of the objects), the rules' sources (one tuple per catalog), their queries and the results. The
    results are held weakly: once the query cache lets one go it can never be handed out again, and a large result
    that matched nothing must not stay in memory for the sake of an empty answer."""

    names: list[str] | None
    sources: tuple[MetricSource, ...]
    queries: Mapping[int, str]
    results: tuple[weakref.ref[QueryResult], ...]
    values: MetricValues

    @property
    def weight(self) -> int:
        return len(self.values) * ITEM_BYTES + sum(map(len, self.queries.values())) + ITEM_BYTES


class Provider:
    def __init__(
        self,
        catalog: Callable[[], Catalog],
        prometheus: PrometheusAPI | Backends,
        objects: ObjectLister,
        cache: SingleFlightCache[tuple[str, str], QueryResult],
        metrics: AdapterMetrics,
        resolve: Callable[[GroupResource], Awaitable[ResourceInfo | None]] | None = None,
        hold: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``resolve``: a resource the catalog's REST mapping does not know, looked up again (the REST mapper).
        ``cache``: query results by backend and PromQL. ``hold``: how long after Prometheus gave an answer it may
        still be served while Prometheus fails (``held_answers.py``; 0: never)."""
        self.catalog = catalog
        self.resolve = resolve
        self.backends = Backends.of(prometheus)
        self.objects = objects
        self.cache = cache
        self.metrics = metrics
        # one log line per metric and object a minute: a NaN (a division by zero) tends to repeat every request
        self._dropped_logged: TTLCache[tuple[str, str], bool] = TTLCache(10_000, _DROP_LOG_EVERY)
        # one line a minute per rule and kind of failure: while Prometheus is down every request (and every KEDA
        # stream, asking each second) fails the same way; the next line says how many were left out
        self._failure_log = LogLimit(_DROP_LOG_EVERY)
        # the one answer cache: the last answer to each request, reused while what it depends on is the same
        self._answers: LRUCache[CustomRequest, _Answer] = LRUCache(MEMO_BYTES, getsizeof=lambda a: a.weight)
        self.held_custom: HeldAnswers[CustomRequest, MetricValues] = HeldAnswers(
            "custom", hold, metrics, _weight, clock
        )
        self.held_external: HeldAnswers[ExternalRequest, list[ExternalValue]] = HeldAnswers(
            "external", hold, metrics, _weight, clock
        )
        metrics.held_answers.watch(self.hold_states)

    def hold_states(self) -> list[HoldState]:
        """The answers held in Prometheus' place now, per API."""
        return [self.held_custom.state(), self.held_external.state()]

    def resource_entries(self, group: str) -> list[ResourceEntry]:
        """The APIResourceList lines of a group, from memory; never raises."""
        catalog = self.catalog()
        if group == CUSTOM_GROUP:
            return sorted(ResourceEntry(f"{gr}/{name}", m.info.namespaced) for (name, gr), m in catalog.custom.items())
        return sorted(ResourceEntry(m.name, True) for m in catalog.external.values())

    def served_groups(self) -> list[str]:
        rules = self.catalog().rules
        groups = [CUSTOM_GROUP] if rules.rules else []
        groups += [EXTERNAL_GROUP] if rules.external_rules else []
        return groups + ([RESOURCE_GROUP] if rules.resource_rules else [])

    async def _served(self, req: CustomRequest) -> tuple[ResourceInfo, CustomMetric]:
        """The resource and metric a request names; NotFound, saying why, when this adapter serves no such thing. A
        resource the REST mapping does not know may make it read API discovery again (``rest_mapper.py``)."""
        gr = req.resource
        catalog = self.catalog()
        info = catalog.resource(gr)
        if info is None and self.resolve is not None and await self.resolve(gr) is not None:
            catalog = self.catalog()  # built again with the REST mapping that knows the resource now
            info = catalog.resource(gr)
        metric = catalog.custom_metric(req.metric, info.group_resource) if info else None
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

    async def _names(self, req: CustomRequest, info: ResourceInfo, trace: Trace) -> list[str] | None:
        """The objects the request covers: its one object, or those its selector matches (None: every object)."""
        if req.name is not None:
            trace.names = [req.name]
            return trace.names
        listing = trace.listing = await self.objects.names(info, req.namespace, req.label_selector)
        if listing.names is None and req.label_selector:
            raise NotConfigured(
                "labelSelector needs object labels from the Kubernetes API, and this adapter runs without one "
                "(give it --lister-kubeconfig, or run it in a cluster)"
            )
        trace.names = listing.names
        return listing.names

    async def custom(self, req: CustomRequest, trace: Trace | None = None) -> MetricValues:
        """The values of a custom-metrics request; while Prometheus fails, its last good values within the hold."""
        explaining, trace = trace is not None, trace or Trace()
        try:
            items = await self._custom(req, trace, explaining)
        except AdapterError as e:
            held = self.held_custom.instead_of(req, e)
            if held is None:
                raise
            trace.held_age, trace.held_error = self.held_custom.age(held), held.error
            if trace.names is None or req.name is not None:
                return held.answer
            # a pod deleted meanwhile has no value any more: the watch cache still knows which objects are asked
            wanted = set(trace.names)
            if all(item.described.name in wanted for item in held.answer):
                return held.answer
            return MetricValues(item for item in held.answer if item.described.name in wanted)
        self.held_custom.keep(req, items)
        return items

    async def _custom(self, req: CustomRequest, trace: Trace, explaining: bool) -> MetricValues:
        info, metric = await self._served(req)
        names = await self._names(req, info, trace)
        if names == []:
            return MetricValues()
        memo = None if explaining else self._answers.get(req)
        if memo is not None and not (memo.sources is metric.sources and (memo.names is names or memo.names == names)):
            memo = None
        wanted = set(names) if names is not None else None
        namespace = req.namespace if info.namespaced else None
        queries: dict[int, str] = dict(memo.queries) if memo else {}  # source index → PromQL
        # each object is answered by the first source (rule) with a sample for it, finite or not
        owner: dict[str, int] = {}

        def query(index: int, source: MetricSource) -> str:
            if index not in queries:
                queries[index] = custom_query(
                    source.rule, source.series, source.label, info, namespace, names, req.metric_selector
                )
            return queries[index]

        def claim(index: int, record: QueryRecord, result: QueryResult) -> bool:
            answered = len(owner)
            for name, _, _ in result.samples.named(record.source.label, wanted):  # not a Python step for every sample
                owner.setdefault(name, index)
            if len(owner) == answered and not explaining:
                # of no use here: let go before the next rule's answer is read rather than held to the end (six
                # requests at once through three rules each, on 30 MB answers for other pods, held a gigabyte)
                record.result = None
            return wanted is not None and len(owner) >= len(wanted)

        used = await self._fetch(metric.sources, query, claim, trace)
        results = tuple(r.result for r in used if r.result is not None)
        kept = [ref() for ref in memo.results] if memo is not None else []
        if memo is not None and len(kept) == len(results) and all(map(operator.is_, kept, results)):
            return memo.values
        items = self._convert(req, info, namespace, used, owner)
        if req.name is not None and not items:
            where = f" in namespace {namespace}" if namespace else ""
            raise NotFound(f"the server could not find the metric {req.metric} for {req.resource} {req.name}{where}")
        answer = _Answer(names, metric.sources, queries, tuple(map(weakref.ref, results)), items)
        if not explaining and answer.weight <= MEMO_BYTES:
            self._answers[req] = answer
        return items

    def _convert(
        self,
        req: CustomRequest,
        info: ResourceInfo,
        namespace: str | None,
        used: list[QueryRecord],
        owner: dict[str, int],
    ) -> MetricValues:
        selector = req.metric_selector.to_label_selector()
        kind, api_version, metric = info.kind, info.api_version, req.metric
        found: dict[str, MetricValue] = {}
        for index, record in enumerate(used):
            rule, label = record.source.rule, record.source.label
            window = window_seconds(rule.metrics_query.text) or DEFAULT_WINDOW_SECONDS
            for name, timestamp, raw in record.result.samples.named(label, owner) if record.result else ():
                if owner[name] != index:
                    continue
                # the owner answered: later samples for the name (a metricsQuery without aggregation) are ignored
                owner[name] = -1
                value = self._value(raw, metric, name, record)
                if value is not None:
                    ref = ObjectRef(kind, namespace, name, api_version)
                    found[name] = MetricValue(ref, metric, selector, timestamp, window, value)
        return MetricValues(found[n] for n in sorted(found))

    async def external(self, req: ExternalRequest, trace: Trace | None = None) -> list[ExternalValue]:
        """The values of an external-metrics request; while Prometheus fails, its last good values within the hold."""
        trace = trace or Trace()
        try:
            values = await self._external(req, trace)
        except AdapterError as e:
            held = self.held_external.instead_of(req, e)
            if held is None:
                raise
            trace.held_age, trace.held_error = self.held_external.age(held), held.error
            return held.answer
        self.held_external.keep(req, values)
        return values

    async def _external(self, req: ExternalRequest, trace: Trace) -> list[ExternalValue]:
        metric = self.catalog().external_metric(req.metric)
        if metric is None:
            raise NotFound(f"the server could not find the external metric {req.metric}")
        out: list[ExternalValue] = []

        def query(index: int, source: MetricSource) -> str:
            return external_query(source.rule, source.series, req.namespace, req.metric_selector)

        def answered(index: int, record: QueryRecord, result: QueryResult) -> bool:
            return bool(result.samples)

        # several rules exposing one external name would be summed twice by the HPA: the first that answers wins
        used = await self._fetch(metric.sources, query, answered, trace)
        for record in used[-1:]:
            for sample in record.result.samples if record.result else ():
                # an empty value is no label, as in Prometheus's data model (MetricsQL's label_replace keeps q="")
                labels = {k: v for k, v in sample.labels.items() if v and k != "__name__"}
                shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
                value = self._value(sample.value, req.metric, shown, record)
                if value is not None:
                    out.append(ExternalValue(req.metric, labels, sample.timestamp, value))
        return sorted(out, key=lambda v: sorted(v.labels.items()))

    async def _fetch(
        self,
        sources: tuple[MetricSource, ...],
        query: Callable[[int, MetricSource], str],
        claim: Callable[[int, QueryRecord, QueryResult], bool],
        trace: Trace,
    ) -> list[QueryRecord]:
        """Query each source in rule order until ``claim`` says every object is answered; a failing source costs
        only its own answers, unless every source fails. Returns the records of the sources that answered."""
        used: list[QueryRecord] = []
        failures: list[AdapterError] = []
        for index, source in enumerate(sources):
            record = QueryRecord(source, "")
            trace.queries.append(record)
            try:
                record.promql = query(index, source)
                fetch = functools.partial(self.backends[record.backend].query, record.promql)
                record.result, record.cache = await self.cache.get((record.backend, record.promql), fetch)
            except AdapterError as e:
                record.error = str(e)
                held = self._failure_log.allow(f"{source.rule.where} {type(e).__name__}")
                if held is not None:
                    log.warning("%s (series %s): %s%s", source.rule.where, source.series, e,
                                left_out(held, self._failure_log.interval))  # fmt: skip
                failures.append(e)
                continue
            used.append(record)
            if claim(len(used) - 1, record, record.result):
                break
        if failures and len(failures) == len(sources):
            raise failures[0]
        return used

    def _value(self, raw: str, metric: str, name: str, record: QueryRecord) -> str | None:
        """A sample value's quantity, kept in the record; None when it has none (NaN, ±Inf, beyond float64's range, not
        a number), counted and logged."""
        try:
            value = sample_quantity(raw)
        except NotFinite:
            self._drop(raw, metric, name, record, "nan" if raw.lower() == "nan" else "inf")
            return None
        except ValueError:
            self._drop(raw, metric, name, record, "invalid")
            return None
        record.kept.append(name)
        return value

    def _drop(self, raw: str, metric: str, name: str, record: QueryRecord, reason: str) -> None:
        self.metrics.dropped_samples.labels(reason).inc()
        record.dropped.append((name, raw))
        if (metric, name) not in self._dropped_logged:
            self._dropped_logged[(metric, name)] = True
            shown = raw if len(raw) <= 40 else f"{raw[:20]}...({len(raw)} characters)"
            log.warning("dropped %s = %s for %s: not a finite number", metric, shown, name)


def _weight(values: list[MetricValue] | list[ExternalValue]) -> int:
    """About the bytes an answer holds, as the answer memo weighs one."""
    return (len(values) + 1) * ITEM_BYTES
