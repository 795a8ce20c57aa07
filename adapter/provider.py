"""Answers to metric requests as Kubernetes objects: catalog → objects → PromQL → Prometheus → values.

No HTTP here and no PromQL text: the provider strings together the catalog (which rules answer a metric), the object
lister (which objects a wildcard covers), query building and the query cache. It records what it did in an optional
``Trace``, which the explain endpoint and command show.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from cachetools import TTLCache

from adapter import resources
from adapter.discovery import Catalog, MetricSource
from adapter.errors import AdapterError, NotConfigured, NotFound
from adapter.kube_cache import Listing, ObjectLister
from adapter.objects import ExternalValue, MetricValue, ObjectRef, ResourceEntry
from adapter.paths import CUSTOM_GROUP, CustomRequest, ExternalRequest
from adapter.prometheus import PrometheusAPI, QueryResult, Sample
from adapter.promql import window_seconds
from adapter.quantity import NotFinite, format_quantity, parse_sample_value
from adapter.queries import custom_query, external_query
from adapter.self_metrics import AdapterMetrics
from adapter.value_cache import QueryCache

log = logging.getLogger(__name__)

# The window reported for instant queries (no range selector): the HPA does not use it, and a minute is what
# dashboards and prometheus-adapter users read an instant GPU gauge as.
DEFAULT_WINDOW_SECONDS = 60
_DROP_LOG_EVERY = 60.0


@dataclass
class QueryRecord:
    source: MetricSource
    promql: str
    cache: str = ""
    result: QueryResult | None = None
    error: str = ""
    kept: list[str] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    unmatched: int = 0


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
        cache: QueryCache[QueryResult],
        metrics: AdapterMetrics,
    ) -> None:
        self.catalog = catalog
        self.prometheus = prometheus
        self.objects = objects
        self.cache = cache
        self.metrics = metrics
        # one log line per metric and object a minute: a NaN (a division by zero) tends to repeat every request
        self._dropped_logged: TTLCache[tuple[str, str], bool] = TTLCache(10_000, _DROP_LOG_EVERY)

    def resource_entries(self, group: str) -> list[ResourceEntry]:
        """The APIResourceList lines of a group, from memory; never raises."""
        catalog = self.catalog()
        if group == CUSTOM_GROUP:
            return sorted(ResourceEntry(f"{gr}/{name}", m.info.namespaced) for (name, gr), m in catalog.custom.items())
        return sorted(ResourceEntry(m.name, True) for m in catalog.external.values())

    def served_groups(self) -> list[str]:
        rules = self.catalog().rules
        groups = [CUSTOM_GROUP] if rules.rules else []
        return groups + (["external.metrics.k8s.io"] if rules.external_rules else [])

    async def custom(self, req: CustomRequest, trace: Trace | None = None) -> list[MetricValue]:
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
        names: list[str] | None = [req.name] if req.name is not None else None
        if req.name is None:
            listing = await self.objects.names(info, req.namespace, req.label_selector)
            names = listing.names
            if trace:
                trace.listing = listing
            if names is None and req.label_selector:
                raise NotConfigured(
                    "labelSelector needs object labels from the Kubernetes API, and this adapter runs without one "
                    "(give it --lister-kubeconfig, or run it in a cluster)"
                )
        if trace:
            trace.names = names
        if names == []:
            return []
        wanted = set(names) if names is not None else None
        namespace = req.namespace if info.namespaced else None
        selector = req.metric_selector.to_label_selector()
        found: dict[str, MetricValue] = {}
        # objects an earlier source had a sample for, finite or not: the first source with the object answers it
        seen: set[str] = set()

        def convert(source: MetricSource, samples: tuple[Sample, ...], record: QueryRecord | None) -> None:
            label = source.rule.label_for(info) or ""
            window = _window(source.rule.metrics_query.text)
            for sample in samples:
                name = sample.labels.get(label)
                if not name or (wanted is not None and name not in wanted):
                    if record:
                        record.unmatched += 1
                    continue
                if name in seen:
                    continue
                seen.add(name)
                value = self._value(sample, req.metric, name, record)
                if value is not None:
                    ref = ObjectRef(info.kind, namespace, name, info.api_version)
                    found[name] = MetricValue(ref, req.metric, selector, sample.timestamp, window, value)
                    if record:
                        record.kept.append(name)

        def query(source: MetricSource) -> str:
            return custom_query(source.rule, source.series, info, namespace, names, req.metric_selector)

        def complete() -> bool:
            return wanted is not None and len(seen) >= len(wanted)

        await self._each_source(metric.sources, query, convert, trace, complete)
        if req.name is not None and not found:
            where = f" in namespace {namespace}" if namespace else ""
            raise NotFound(f"the server could not find the metric {req.metric} for {gr} {req.name}{where}")
        return [found[n] for n in sorted(found)]

    async def external(self, req: ExternalRequest, trace: Trace | None = None) -> list[ExternalValue]:
        metric = self.catalog().external_metric(req.metric)
        if metric is None:
            raise NotFound(f"the server could not find the external metric {req.metric}")
        out: list[ExternalValue] = []

        def convert(source: MetricSource, samples: tuple[Sample, ...], record: QueryRecord | None) -> None:
            for sample in samples:
                labels = {k: v for k, v in sample.labels.items() if k != "__name__"}
                value = self._value(sample, req.metric, str(sorted(labels.items())), record)
                if value is not None:
                    out.append(ExternalValue(req.metric, labels, sample.timestamp, value))
                    if record:
                        record.kept.append(",".join(f"{k}={v}" for k, v in sorted(labels.items())))

        def query(source: MetricSource) -> str:
            return external_query(source.rule, source.series, req.namespace, req.metric_selector)

        # several rules exposing one external name would be summed twice by the HPA: the first that answers wins
        await self._each_source(metric.sources, query, convert, trace, lambda: bool(out))
        return sorted(out, key=lambda v: sorted(v.labels.items()))

    async def _each_source(
        self,
        sources: tuple[MetricSource, ...],
        query: Callable[[MetricSource], str],
        convert: Callable[[MetricSource, tuple[Sample, ...], QueryRecord | None], None],
        trace: Trace | None,
        done: Callable[[], bool],
    ) -> None:
        """Query each source in rule order until ``done``; one failing source costs only its own answers."""
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
            convert(source, result.samples, record)
            if done():
                return
        if failures and len(failures) == len(sources):
            raise failures[0]

    def _value(self, sample: Sample, metric: str, name: str, record: QueryRecord | None) -> str | None:
        try:
            return _quantity(sample.value)
        except NotFinite:
            reason = "nan" if sample.value.lower() == "nan" else "inf"
        except ValueError:
            reason = "invalid"
        self.metrics.dropped_samples.labels(reason).inc()
        if record:
            record.dropped.append((name, sample.value))
        if (metric, name) not in self._dropped_logged:
            self._dropped_logged[(metric, name)] = True
            log.warning("dropped %s = %s for %s: not a finite number", metric, sample.value, name)
        return None
