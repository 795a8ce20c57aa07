"""prometheus-adapter's rules file, read unchanged and strictly into frozen rules.

Every key prometheus-adapter knows is accepted (``resourceRules`` for metrics.k8s.io, see ``resource_rules.py``),
and ``backend``, which names the server a rule's series are in (``backends/backend_specs.py``); any other key is an
error that names it and where it is. Regexes and templates are compiled here, at load time, so a request never meets a
broken rule."""

from __future__ import annotations

import hashlib
import io
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from importlib import resources as package_files
from pathlib import Path
from typing import Any

import yaml

from adapter.backends.backend_specs import DEFAULT
from adapter.config.resource_rules import ResourceRule, ResourceRules, parse_window
from adapter.errors import ConfigError, TemplateError
from adapter.naming.names import LabelResourceMapper, default_as
from adapter.naming.resources import BUILT_IN, NAMESPACES, GroupResource, ResourceInfo, RestMapping
from adapter.naming.templates import Struct, Template, compile_template
from adapter.query.go_regexp import GoRegexp
from adapter.query.promql import SeriesSelector, parse_series_selector

log = logging.getLogger(__name__)

DEFAULT_RULES = "default-rules.yaml"
DEFAULT_METRICS_QUERY = "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"
_QUERY_SAMPLE = Struct(
    Series="series",
    LabelMatchers='a="b"',
    GroupBy="pod",
    GroupBySlice=["pod"],
    LabelValuesByName={"pod": "p"},
)
_RESOURCE_SAMPLE = Struct(Group="apps", Resource="deployment")

_TOP_KEYS = {"rules", "externalRules", "resourceRules"}
_RULE_KEYS = {"seriesQuery", "seriesFilters", "resources", "name", "metricsQuery", "labelValueReplacements", "backend"}
_RESOURCES_KEYS = {"template", "overrides", "namespaced"}
_RESOURCE_RULES_KEYS = {"cpu", "memory", "window", "backend"}
_RESOURCE_RULE_KEYS = {"containerQuery", "nodeQuery", "resources", "containerLabel"}


@dataclass(frozen=True)
class Rule:
    """One discovery rule: which series, the resources they describe, their API name, the query for values."""

    where: str
    external: bool
    series_query: SeriesSelector
    filters: tuple[tuple[GoRegexp, bool], ...]
    name_matches: GoRegexp
    name_as: str
    mapper: LabelResourceMapper
    namespaced: bool
    metrics_query: Template
    replacements: tuple[tuple[str, str], ...]
    backend: str = DEFAULT  # the server its series are listed in and queried from

    def accepts(self, series: str) -> bool:
        return all(p.search(series) == positive for p, positive in self.filters)

    def api_name(self, series: str) -> str | None:
        return self.name_matches.expand(self.name_as, series)

    def resource_for_label(self, label: str, mapping: RestMapping) -> ResourceInfo | None:
        return self.mapper.resource_for_label(label, mapping)

    def label_for(self, info: ResourceInfo, mapping: RestMapping) -> str | None:
        return self.mapper.label_for_resource(info.group_resource, mapping)

    @property
    def namespace_label(self) -> str | None:
        # namespaces are core v1 in every cluster: no discovery needed to find their label
        return self.label_for(NAMESPACES, BUILT_IN)

    def declared(self, mapping: RestMapping) -> list[tuple[str, str, tuple[tuple[str, ResourceInfo], ...]]]:
        """(series, API name, (label, resource) pairs) for each series name the rule pins down without asking
        Prometheus (one, or an alternation of plain names)."""
        # a namespaced resource needs the namespace label too, as in discovery
        has_namespace = self.namespace_label is not None
        found = self.mapper.resolved_overrides(mapping)
        pairs = tuple((label, info) for label, info in found if has_namespace or not info.namespaced)
        declared = []
        for series in self.series_query.literal_names():
            name = self.api_name(series) if self.accepts(series) else None
            if name:
                declared.append((series, name, pairs))
        return declared


@dataclass(frozen=True)
class RuleSet:
    source: str
    digest: str
    rules: tuple[Rule, ...]
    external_rules: tuple[Rule, ...]
    resource_rules: ResourceRules | None = None

    def check_backends(self, known: Collection[str]) -> None:
        """``ConfigError`` naming the first rule whose backend is not one of ``known``."""
        named = [(r.where, r.backend) for r in (*self.rules, *self.external_rules)]
        if self.resource_rules is not None:
            named.append((f"{self.source}: resourceRules", self.resource_rules.backend))
        for where, backend in named:
            if backend not in known:
                raise ConfigError(
                    f"{where}.backend: {backend!r} is not a backend; the backends are {', '.join(sorted(known))} "
                    f"({DEFAULT!r} is --prometheus-url's, the others come from --prometheus-backend)"
                )


class _StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate keys instead of silently keeping the last one."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        try:
            hash(key)
        except TypeError:
            raise ConfigError(
                f"a key at line {key_node.start_mark.line + 1} is a {type(key).__name__}; keys must be names"
            ) from None
        if key in seen:
            raise ConfigError(f"duplicate key {key!r} at line {key_node.start_mark.line + 1}")
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


# a YAML value's kind in the file's words, not Python's
_KINDS = {dict: "a mapping", list: "a list", str: "a string", int: "a number", float: "a number", bool: "true or false"}


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    shown = f" ({value!r})" if isinstance(value, str | int | float) and len(repr(value)) <= 40 else ""
    return _KINDS.get(type(value), type(value).__name__) + shown


def _check(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        names = " or ".join(dict.fromkeys(_KINDS.get(t, t.__name__) for t in kinds))
        raise ConfigError(f"{where}: expected {names}, got {_kind(value)}")
    return value


def _keys(value: Any, allowed: set[str], where: str) -> Mapping[str, Any]:
    if value is not None and not isinstance(value, dict):
        keys = ", ".join(sorted(allowed))
        raise ConfigError(f"{where}: expected a mapping (of {keys}), got {_kind(value)}")
    mapping: Mapping[str, Any] = value if value is not None else {}
    for key in mapping:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r} (known keys: {', '.join(sorted(allowed))})")
    return mapping


def _regex(text: Any, where: str) -> GoRegexp:
    """A pattern in Go's syntax (RE2), as prometheus-adapter compiles it: ``[[:alpha:]]``, ``\\pL``, ``(?U)``."""
    try:
        return GoRegexp(_check(text, str, where))
    except ValueError as e:
        raise ConfigError(f"{where}: invalid regular expression {text!r} (RE2 syntax, as Go's regexp): {e}") from e


def _parse_rule(raw: Any, where: str, external: bool) -> Rule:
    spec = _keys(raw, _RULE_KEYS, where)
    if "seriesQuery" not in spec:
        raise ConfigError(f"{where}: seriesQuery is required")
    try:
        series_query = parse_series_selector(_check(spec["seriesQuery"], str, f"{where}.seriesQuery"))
    except ValueError as e:
        raise ConfigError(f"{where}.seriesQuery: {e}") from e
    filters = _series_filters(spec, where)
    matches, name_as, selects = _name(spec, where)
    if selects:
        filters.append((matches, True))  # a given name.matches also selects the series, as in prometheus-adapter
    mapper, namespaced = _resources(spec, where)
    return Rule(
        where=where,
        external=external,
        series_query=series_query,
        filters=tuple(filters),
        name_matches=matches,
        name_as=name_as,
        mapper=mapper,
        namespaced=namespaced,
        metrics_query=_metrics_query(spec, where),
        replacements=_replacements(spec, where),
        backend=_backend(spec, where),
    )


def _backend(spec: Mapping[str, Any], where: str) -> str:
    """``backend``: a server's name (``--prometheus-backend``); without it, ``--prometheus-url``'s."""
    backend: str = _check(spec.get("backend", DEFAULT), str, f"{where}.backend")
    if not backend.strip():
        raise ConfigError(f"{where}.backend is empty: name a --prometheus-backend, or leave the key out")
    return backend.strip()


def _series_filters(spec: Mapping[str, Any], where: str) -> list[tuple[GoRegexp, bool]]:
    filters: list[tuple[GoRegexp, bool]] = []
    for i, f in enumerate(_check(spec.get("seriesFilters") or [], list, f"{where}.seriesFilters")):
        fw = f"{where}.seriesFilters[{i}]"
        f = _keys(f, {"is", "isNot"}, fw)
        if bool(f.get("is")) == bool(f.get("isNot")):
            raise ConfigError(f"{fw}: needs exactly one of 'is' and 'isNot'")
        filters.append((_regex(f.get("is") or f["isNot"], fw), bool(f.get("is"))))
    return filters


def _name(spec: Mapping[str, Any], where: str) -> tuple[GoRegexp, str, bool]:
    """``name.matches`` (every name when absent), ``name.as`` (its default derived from matches), and whether
    matches was given."""
    name = _keys(spec.get("name"), {"matches", "as"}, f"{where}.name")
    matches = _regex(name.get("matches") or ".*", f"{where}.name.matches")
    try:
        name_as = _check(name.get("as") or "", str, f"{where}.name.as") or default_as(matches, f"{where}.name")
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return matches, name_as, bool(name.get("matches"))


def _resources(spec: Mapping[str, Any], where: str) -> tuple[LabelResourceMapper, bool]:
    res = _keys(spec.get("resources"), _RESOURCES_KEYS, f"{where}.resources")
    # resolved through API discovery when series are found (a CRD may be installed later): see names.py
    overrides: dict[str, GroupResource] = {}
    for label, target in _check(res.get("overrides") or {}, dict, f"{where}.resources.overrides").items():
        tw = f"{where}.resources.overrides.{label}"
        target = _keys(target, {"group", "resource"}, tw)
        resource = _check(target.get("resource"), str, f"{tw}.resource")
        if not resource.strip():
            raise ConfigError(f"{tw}.resource is empty: name a resource (pod, deployment, rayclusters, ...)")
        overrides[str(label)] = GroupResource(resource.strip(), _check(target.get("group") or "", str, f"{tw}.group"))
    template = None
    if res.get("template"):
        try:
            template = compile_template(
                _check(res["template"], str, f"{where}.resources.template"),
                f"{where}.resources.template",
                _RESOURCE_SAMPLE,
            )
        except TemplateError as e:
            raise ConfigError(str(e)) from e
    namespaced = _check(res.get("namespaced", True), bool, f"{where}.resources.namespaced")
    return LabelResourceMapper(overrides, template), namespaced


def _metrics_query(spec: Mapping[str, Any], where: str) -> Template:
    query_text = _check(spec.get("metricsQuery") or "", str, f"{where}.metricsQuery")
    if not query_text:
        log.warning("%s: no metricsQuery; using %s", where, DEFAULT_METRICS_QUERY)
        query_text = DEFAULT_METRICS_QUERY
    try:
        return compile_template(query_text, f"{where}.metricsQuery", _QUERY_SAMPLE)
    except TemplateError as e:
        raise ConfigError(str(e)) from e


def _replacements(spec: Mapping[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    replacements = []
    for i, r in enumerate(_check(spec.get("labelValueReplacements") or [], list, f"{where}.labelValueReplacements")):
        r = _keys(r, {"find", "replace"}, f"{where}.labelValueReplacements[{i}]")
        replacements.append((str(r.get("find") or ""), str(r.get("replace") or "")))
    return tuple(replacements)


def _resource_rules(raw: Any, where: str) -> ResourceRules:
    spec = _keys(raw, _RESOURCE_RULES_KEYS, where)
    cpu, memory = (_resource_rule(spec.get(part), f"{where}.{part}") for part in ("cpu", "memory"))
    return ResourceRules(cpu, memory, parse_window(spec.get("window"), f"{where}.window"), _backend(spec, where))


def _resource_rule(raw: Any, where: str) -> ResourceRule:
    spec = _keys(raw, _RESOURCE_RULE_KEYS, where)
    queries = []
    for key in ("containerQuery", "nodeQuery"):
        text = _check(spec.get(key) or "", str, f"{where}.{key}")
        try:
            queries.append(compile_template(text, f"{where}.{key}", _QUERY_SAMPLE))
        except TemplateError as e:
            raise ConfigError(str(e)) from e
    mapper, _ = _resources(spec, where)
    label = _check(spec.get("containerLabel") or "", str, f"{where}.containerLabel")
    rule = ResourceRule(where, queries[0], queries[1], mapper, label)
    for problem in rule.problems():
        log.warning("%s", problem)
    return rule


def parse_rules(text: str, source: str) -> RuleSet:
    """Parse rules-file text; ``ConfigError`` names the file, the place and the problem."""
    stream = io.StringIO(text)
    stream.name = source  # PyYAML names the stream in its messages: the file, not "<unicode string>"
    try:
        raw = yaml.load(stream, Loader=_StrictLoader)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from e
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from e
    top = _keys(raw, _TOP_KEYS, source)
    resource_rules = None
    if top.get("resourceRules") is not None:
        resource_rules = _resource_rules(top["resourceRules"], f"{source}: resourceRules")
    rules = tuple(
        _parse_rule(r, f"{source}: rules[{i}]", external=False)
        for i, r in enumerate(_check(top.get("rules") or [], list, f"{source}: rules"))
    )
    external = tuple(
        _parse_rule(r, f"{source}: externalRules[{i}]", external=True)
        for i, r in enumerate(_check(top.get("externalRules") or [], list, f"{source}: externalRules"))
    )
    return RuleSet(source, hashlib.sha256(text.encode()).hexdigest(), rules, external, resource_rules)


def default_rules_text() -> str:
    return package_files.files("adapter").joinpath(DEFAULT_RULES).read_text(encoding="utf-8")


def load_rules(path: Path | None) -> RuleSet:
    """The rules in ``path``, or the built-in GPU rules when no file is given."""
    if path is None:
        return parse_rules(default_rules_text(), "built-in default rules")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read the rules file {path}: {e.strerror}") from e
    return parse_rules(text, str(path))
