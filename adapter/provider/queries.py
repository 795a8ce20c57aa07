"""The PromQL sent for a metric request: a rule's metricsQuery rendered with escaped matchers (pure functions).

The template arguments are prometheus-adapter's: ``Series``, ``LabelMatchers`` (comma-joined matchers),
``GroupBy``/``GroupBySlice`` (the resource label), ``LabelValuesByName`` (label → values as one regex
alternation). Unlike prometheus-adapter, values are escaped everywhere: a matcher value only matches itself, and a
``LabelValuesByName`` entry is already regex- and string-escaped, safe to place inside ``=~"..."``.
"""

from __future__ import annotations

from collections.abc import Sequence

from adapter.config.resource_rules import ResourceRule
from adapter.config.rules import Rule
from adapter.errors import QueryError, TemplateError
from adapter.naming.resources import NAMESPACES, NODES, PODS, ResourceInfo
from adapter.naming.templates import Struct, Template
from adapter.query.promql import alternation, matcher, names_matcher_and_alternation, quote, selector_matchers
from adapter.query.selectors import Op, Selector


def _escaped_alternation(values: Sequence[str]) -> str:
    return quote(alternation(values))[1:-1]


def _render(rule: Rule, args: Struct) -> str:
    return _render_template(rule.metrics_query, f"{rule.where}.metricsQuery", args)


def _render_template(template: Template, where: str, args: Struct) -> str:
    try:
        query = template.render(args)
    except TemplateError as e:
        raise QueryError(f"{where}: {e}") from e
    if not query.strip():
        raise QueryError(f"{where} produced an empty query")
    return query


def _selector_values(selector: Selector, replacements: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    values = {}
    for r in selector.requirements:
        if r.op in (Op.EQUALS, Op.DOUBLE_EQUALS, Op.IN, Op.NOT_EQUALS, Op.NOT_IN):
            replaced = list(r.values)
            for find, replace in replacements:
                replaced = [v.replace(find, replace) for v in replaced]
            values[r.key] = _escaped_alternation(replaced)
    return values


def custom_query(
    rule: Rule,
    series: str,
    resource_label: str,
    info: ResourceInfo,
    namespace: str | None,
    names: Sequence[str] | None,
    metric_selector: Selector,
) -> str:
    """The query for ``series`` on objects ``names`` (None: every object) of ``info``, named by ``resource_label``,
    in ``namespace``."""
    matchers = selector_matchers(metric_selector)
    values = _selector_values(metric_selector)
    if namespace is not None and info.namespaced:
        ns_label = rule.namespace_label
        if ns_label is None:
            raise QueryError(f"{rule.where} maps no label to namespaces, so it cannot answer for {info.group_resource}")
        matchers.append(matcher(ns_label, "=", namespace))
        values[ns_label] = _escaped_alternation([namespace])
    if names is None:
        matchers.append(matcher(resource_label, "!=", ""))
    else:
        names_part, values[resource_label] = names_matcher_and_alternation(resource_label, names)
        matchers.append(names_part)
    args = Struct(
        Series=series,
        LabelMatchers=",".join(matchers),
        GroupBy=resource_label,
        GroupBySlice=[resource_label],
        LabelValuesByName=values,
    )
    return _render(rule, args)


def external_query(rule: Rule, series: str, namespace: str, metric_selector: Selector) -> str:
    """The query for an external metric, scoped to the request's namespace unless the rule says ``namespaced:
    false``: through the label the rule maps to namespaces, or ``namespace`` when it maps none, so that no rule
    shape answers with another namespace's samples (a caller is authorized for one namespace)."""
    matchers = selector_matchers(metric_selector, "labelSelector")
    values = _selector_values(metric_selector, rule.replacements)
    ns_label = rule.namespace_label or "namespace"
    if rule.namespaced:
        matchers.append(matcher(ns_label, "=", namespace))
        values[ns_label] = _escaped_alternation([namespace])
    args = Struct(
        Series=series, LabelMatchers=",".join(matchers), GroupBy="", GroupBySlice=[], LabelValuesByName=values
    )
    return _render(rule, args)


def pod_resource_query(rule: ResourceRule, namespace: str, pods: Sequence[str]) -> str:
    """A resource rule's containerQuery for ``pods`` of ``namespace``, grouped by the pod label, then the container
    label, as prometheus-adapter builds it: the namespace matcher, then the pods'."""
    namespace_label = rule.label(NAMESPACES)
    matchers = [matcher(namespace_label, "=", namespace)]
    values = {namespace_label: _escaped_alternation([namespace])}
    return _resource_query(rule, rule.container_query, "containerQuery", rule.label(PODS), pods, matchers, values)


def node_resource_query(rule: ResourceRule, nodes: Sequence[str]) -> str:
    """A resource rule's nodeQuery for ``nodes``, grouped by the node label."""
    return _resource_query(rule, rule.node_query, "nodeQuery", rule.label(NODES), nodes, [], {})


def _resource_query(
    rule: ResourceRule,
    template: Template,
    key: str,
    label: str,
    names: Sequence[str],
    matchers: list[str],
    values: dict[str, str],
) -> str:
    names_part, values[label] = names_matcher_and_alternation(label, names)
    group_by = [label, rule.container_label] if key == "containerQuery" else [label]
    args = Struct(
        Series="",
        LabelMatchers=",".join([*matchers, names_part]),
        GroupBy=",".join(group_by),
        GroupBySlice=group_by,
        LabelValuesByName=values,
    )
    return _render_template(template, f"{rule.where}.{key}", args)
