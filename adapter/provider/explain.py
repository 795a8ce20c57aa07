"""For one metric request: which rule matched, the PromQL sent, what came back, and why nothing did.

"the server could not find the metric" is prometheus-adapter's most reported confusion. The report runs the request
through the same provider as the API (so it shows exactly what the API does) and, when the answer is empty or an
error, asks Prometheus a few more questions to say why. Each query names the backend that answered it, and what
that backend remarked beside its data (a Thanos querier's warning that a store did not answer: a partial answer).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from adapter.api.objects import external_value_list, metric_value_list, status, timestamp
from adapter.api.paths import CustomRequest, ExternalRequest, ResourceListRequest, parse_metrics_path
from adapter.backends.backend_specs import DEFAULT
from adapter.backends.prometheus_backends import Backends
from adapter.errors import AdapterError
from adapter.naming.resources import GroupResource
from adapter.provider.discovery import Catalog
from adapter.provider.provider import Provider, QueryRecord, Trace
from adapter.query.promql import matcher

MAX_SAMPLES_SHOWN = 50


class DiscoveryReport(TypedDict):
    rules: str
    relistedAt: str | None
    lastError: str | None


class RuleReport(TypedDict):
    rule: str
    series: str


class ObjectsReport(TypedDict):
    source: str
    count: int | None
    names: list[str] | None


class SampleReport(TypedDict):
    labels: dict[str, str]
    value: str
    timestamp: str


class QueryReport(TypedDict):
    rule: str
    series: str
    backend: str
    promql: str
    cache: str | None
    error: NotRequired[str]
    resultType: NotRequired[str]
    samples: NotRequired[list[SampleReport]]
    sampleCount: NotRequired[int]
    warnings: NotRequired[list[str]]
    infos: NotRequired[list[str]]
    kept: list[str]
    dropped: NotRequired[list[dict[str, str]]]


class HeldReport(TypedDict):
    """The answer is the question's last good one, served while Prometheus fails (``--backend-failure-hold``)."""

    ageSeconds: float  # since Prometheus gave it; its items keep the timestamps Prometheus gave them
    holdSeconds: float  # how long after that it may be served
    error: str  # why Prometheus' answer is not fresh


class ExplainReport(TypedDict):
    """What ``/explain/<path>`` and ``gpuscale-adapter explain`` answer: the request as parsed, the rules, objects
    and queries it went through, the answer the API gives, and why it is what it is."""

    request: str
    discovery: DiscoveryReport
    why: list[str]
    parsed: NotRequired[dict[str, str | None]]
    rules: NotRequired[list[RuleReport]]
    objects: NotRequired[ObjectsReport]
    queries: NotRequired[list[QueryReport]]
    held: NotRequired[HeldReport]
    answer: NotRequired[Any]  # the API's JSON answer: a value list, a resource list or a Status


def _record(r: QueryRecord) -> QueryReport:
    out: QueryReport = {
        "rule": r.source.rule.where,
        "series": r.source.series,
        "backend": r.backend,
        "promql": r.promql,
        "cache": r.cache or None,
        "kept": r.kept,
    }
    if r.error:
        out["error"] = r.error
    if r.result is not None:
        out["resultType"] = r.result.result_type
        out["samples"] = [
            {"labels": dict(s.labels), "value": s.value, "timestamp": timestamp(s.timestamp)}
            for s in r.result.samples[:MAX_SAMPLES_SHOWN]
        ]
        out["sampleCount"] = len(r.result.samples)
        if r.result.warnings:
            out["warnings"] = list(r.result.warnings)
        if r.result.infos:
            out["infos"] = list(r.result.infos)
    if r.dropped:
        out["dropped"] = [{"object": n, "value": v} for n, v in r.dropped]
    return out


async def explain(provider: Provider, raw_path: str, query: Mapping[str, str]) -> ExplainReport:
    catalog = provider.catalog()
    shown = raw_path + ("?" + urllib.parse.urlencode(dict(query)) if query else "")
    why: list[str] = []
    report: ExplainReport = {
        "request": shown,
        "discovery": {
            "rules": catalog.rules.source,
            "relistedAt": timestamp(catalog.relisted_at) if catalog.relisted_at else None,
            "lastError": catalog.error,
        },
        "why": why,
    }
    try:
        req = parse_metrics_path(raw_path, query)
    except AdapterError as e:
        report["answer"] = status(e.code, e.reason, str(e))
        why.append(f"the request itself is wrong: {e}")
        return report
    if isinstance(req, ResourceListRequest):
        why.append("a discovery request: it lists the metrics in the catalog")
        report["answer"] = [e.name for e in provider.resource_entries(req.group)]
        return report
    trace = Trace()
    try:
        if isinstance(req, CustomRequest):
            report["parsed"] = _custom_parsed(req)
            metric = catalog.custom_metric(req.metric, _normal(req, catalog))
            if metric:
                report["rules"] = [{"rule": s.rule.where, "series": s.series} for s in metric.sources]
            items = await provider.custom(req, trace)
            report["answer"] = metric_value_list(req.version, items)
        else:
            report["parsed"] = {
                "metric": req.metric,
                "namespace": req.namespace,
                "labelSelector": str(req.metric_selector),
            }
            ext = catalog.external_metric(req.metric)
            if ext:
                report["rules"] = [{"rule": s.rule.where, "series": s.series} for s in ext.sources]
            values = await provider.external(req, trace)
            report["answer"] = external_value_list(req.version, values)
    except AdapterError as e:
        report["answer"] = status(e.code, e.reason, str(e))
        why.append(f"{e.reason}: {e}")
        if trace.queries:
            await _why_items(req, [], trace, provider.backends, why)
        else:
            _why_error(req, provider.catalog(), why)  # the request may have read API discovery again
    if trace.listing is not None:
        names = trace.listing.names
        report["objects"] = {
            "source": trace.listing.source,
            "count": None if names is None else len(names),
            "names": names,
        }
    report["queries"] = [_record(r) for r in trace.queries]
    if trace.held_age is not None:
        hold = provider.held_custom.hold
        report["held"] = {"ageSeconds": round(trace.held_age, 3), "holdSeconds": hold, "error": trace.held_error}
        why.append(
            f"Prometheus failed ({trace.held_error}): this is the last good answer, read {trace.held_age:.0f}s ago and "
            f"served for at most {hold:g}s after that (--backend-failure-hold); its timestamps are Prometheus'"
        )
    if report["answer"].get("kind") != "Status":
        await _why_items(req, report["answer"]["items"], trace, provider.backends, why)
    for record in trace.queries:
        for warning in record.result.warnings if record.result else ():
            why.append(
                f"{record.source.rule.where}: {_who(record.backend)} warned, so its answer may be partial: {warning}"
            )
    return report


def _who(backend: str) -> str:
    return "Prometheus" if backend == DEFAULT else f"the backend {backend}"


def _normal(req: CustomRequest, catalog: Catalog) -> GroupResource:
    info = catalog.resource(req.resource)
    return info.group_resource if info else req.resource


def _custom_parsed(req: CustomRequest) -> dict[str, str | None]:
    return {
        "resource": str(req.resource),
        "namespace": req.namespace,
        "object": req.name or "*",
        "metric": req.metric,
        "labelSelector": str(req.label_selector),
        "metricLabelSelector": str(req.metric_selector),
    }


def _why_error(req: CustomRequest | ExternalRequest, catalog: Catalog, why: list[str]) -> None:
    name = req.metric
    if isinstance(req, CustomRequest) and catalog.custom_metric(name, _normal(req, catalog)) is None:
        others = catalog.resources_of(name)
        if others:
            why.append(f"{name} exists for {', '.join(map(str, others))}, not for {req.resource}")
        if catalog.resource(req.resource) is None:
            why.append(f"{req.resource} is not a resource the API server's discovery lists")
    as_series = {r.api_name(name) for r in (*catalog.rules.rules, *catalog.rules.external_rules) if r.accepts(name)}
    as_series.discard(None)
    if as_series:
        why.append(
            f"{name} is a Prometheus series name; the rules expose it as {', '.join(sorted(map(str, as_series)))}"
        )
    similar = [s for s in catalog.similar(name) if s != name]
    if similar:
        why.append(f"similar metric names: {', '.join(similar)}")
    if catalog.error:
        why.append(f"the last relist failed, so newer series may be missing: {catalog.error}")
    if not catalog.custom and not catalog.external:
        why.append(f"no metrics at all: the rules ({catalog.rules.source}) matched no series in Prometheus")


async def _why_items(
    req: CustomRequest | ExternalRequest,
    items: list[Any],
    trace: Trace,
    backends: Backends,
    why: list[str],
) -> None:
    if items:
        why.append(f"answered {len(items)} item(s)")
        if trace.names is not None and isinstance(req, CustomRequest) and req.name is None:
            missing = sorted(set(trace.names) - {i["describedObject"]["name"] for i in items})
            if missing:
                why.append(f"objects matching labelSelector without a value: {', '.join(missing[:20])}")
        return
    if trace.names == [] and isinstance(req, CustomRequest):
        where = f" in namespace {req.namespace}" if req.namespace else ""
        source = trace.listing.source if trace.listing else "?"
        why.append(f"no {req.resource}{where} match labelSelector {req.label_selector!s} (objects from: {source})")
        return
    for record in trace.queries:
        rule = record.source.rule.where
        if record.error:
            why.append(f"{rule}: the query failed: {record.error}")
        elif record.dropped:
            why.append(f"{rule}: values were not finite numbers and were dropped: {record.dropped[:10]}")
        elif record.result is not None and record.result.samples:
            why.append(
                f"{rule}: the query returned {len(record.result.samples)} sample(s), none labelled with a requested "
                "object: does metricsQuery keep the resource label (by (<<.GroupBy>>))?"
            )
        else:
            why.append(f"{rule}: {_who(record.backend)} returned no samples for {record.promql}")
            await _probe(req, record, backends, why)


async def _probe(req: CustomRequest | ExternalRequest, record: QueryRecord, backends: Backends, why: list[str]) -> None:
    """Does the series exist at all, and for which objects? Asked of the backend the rule names."""
    series, rule = record.source.series, record.source.rule
    prometheus, who = backends[record.backend], _who(record.backend)
    try:
        total = await prometheus.query(f"count({series})")
        if not total.samples:
            why.append(f"{who} has no {series} series at all right now")
            return
        # a custom request that got as far as a query with a namespace is for a namespaced resource
        label = record.source.label if isinstance(req, CustomRequest) else ""
        ns_label = rule.namespace_label
        if not label or ns_label is None or req.namespace is None:
            why.append(f"{who} has {total.samples[0].value} {series} series, none matching these selectors")
            return
        present = await prometheus.query(f"count by ({label}) ({series}{{{matcher(ns_label, '=', req.namespace)}}})")
        names = sorted(s.labels.get(label, "") for s in present.samples)
        if not names:
            why.append(f"{who} has {series} series, but none with {ns_label}={req.namespace}")
        else:
            why.append(f"{series} series in {req.namespace} exist for {label} in: {', '.join(names[:20])}")
    except AdapterError as e:
        why.append(f"could not ask {who} why: {e}")


def render_text(report: ExplainReport) -> str:
    """The report for a terminal."""
    lines = [f"request: {report['request']}"]
    d = report["discovery"]
    lines.append(
        f"rules: {d['rules']}; last relist: {d['relistedAt'] or 'never'}"
        + (f"; last error: {d['lastError']}" if d["lastError"] else "")
    )
    if "parsed" in report:
        lines.append("parsed: " + ", ".join(f"{k}={v}" for k, v in report["parsed"].items() if v not in (None, "")))
    for rule in report.get("rules", []):
        lines.append(f"rule: {rule['rule']} (series {rule['series']})")
    if "objects" in report:
        o = report["objects"]
        names = o["names"] if o["names"] is not None else []
        listed = f": {', '.join(names[:20])}" if names else ""
        lines.append(f"objects: {o['count'] if o['count'] is not None else 'all'} from {o['source']}{listed}")
    for q in report.get("queries", []):
        backend = f", backend {q['backend']}" if q["backend"] != DEFAULT else ""
        cache = f", cache {q['cache']}" if q["cache"] else ""  # none when the query never got an answer
        lines.append(f"query ({q['rule']}{backend}{cache}): {q['promql']}")
        if "error" in q:
            lines.append(f"  error: {q['error']}")
        lines.extend(f"  warning: {w}" for w in q.get("warnings", []))
        lines.extend(f"  info: {i}" for i in q.get("infos", []))
        for s in q.get("samples", []):
            labels = ",".join(f"{k}={v}" for k, v in sorted(s["labels"].items()))
            lines.append(f"  {{{labels}}} = {s['value']} @ {s['timestamp']}")
    if "held" in report:
        h = report["held"]
        lines.append(f"held: the last good answer, read {h['ageSeconds']:.0f}s ago, at most {h['holdSeconds']:g}s")
    lines.append("why:")
    lines.extend(f"  - {line}" for line in report["why"])
    return "\n".join(lines)
