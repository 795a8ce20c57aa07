"""How a rule names things: the default ``name.as``; label names ↔ resources."""

from __future__ import annotations

import re

from adapter.errors import TemplateError
from adapter.naming import resources
from adapter.naming.resources import GroupResource, ResourceInfo, RestMapping
from adapter.naming.templates import Struct, Template
from adapter.query.go_regexp import GoRegexp


def default_as(pattern: GoRegexp, where: str) -> str:
    """What prometheus-adapter uses when ``name.as`` is empty: the whole match, or the only capture group."""
    if pattern.groups == 0:
        return "$0"
    if pattern.groups == 1:
        return "$1"
    raise ValueError(f"{where}: name.matches {pattern.pattern!r} has several capture groups, so name.as is required")


class LabelResourceMapper:
    """Label names to resources and back, from a rule's ``resources.overrides`` and ``resources.template``.

    Overrides are kept as the file names them (``{resource: deployment}``) and resolved through the REST mapping
    each time, so a resource installed later (a CRD) resolves once discovery has seen it."""

    def __init__(self, overrides: dict[str, GroupResource], template: Template | None) -> None:
        self.overrides = overrides
        self.template = template
        self._patterns = _reverse(template) if template else ()

    def resolved_overrides(self, mapping: RestMapping) -> list[tuple[str, ResourceInfo]]:
        """Each override's label and resource, leaving out those the mapping does not know."""
        found = ((label, mapping.lookup(gr.resource, gr.group)) for label, gr in self.overrides.items())
        return [(label, info) for label, info in found if info is not None]

    def resource_for_label(self, label: str, mapping: RestMapping) -> ResourceInfo | None:
        if label in self.overrides:
            gr = self.overrides[label]
            return mapping.lookup(gr.resource, gr.group)
        for pattern in self._patterns:
            m = pattern.match(label)
            info = mapping.lookup_sanitized(m.group("resource"), m.groupdict().get("group") or "") if m else None
            if info is not None:
                return info
        return None

    def label_for_resource(self, gr: GroupResource, mapping: RestMapping = resources.BUILT_IN) -> str | None:
        """The label that names ``gr``: an override that resolves to it, else the template's. The built-in mapping
        is enough for pods, namespaces and nodes (core v1 in every cluster)."""
        for label, overridden in self.resolved_overrides(mapping):
            if overridden.group_resource == gr:
                return label
        info = mapping.lookup(gr.resource, gr.group)
        if self.template is None or info is None:
            return None
        try:
            label = self.template.render(Struct(Group=resources.sanitize_group(gr.group), Resource=info.singular))
        except TemplateError:
            return None
        return label or None


_GROUP_MARK = "\x00group\x00"
_RESOURCE_MARK = "\x00resource\x00"


def _reverse(template: Template) -> tuple[re.Pattern[str], ...]:
    """Regexes recognising the labels ``template`` produces, capturing the group and resource: the shortest group
    first, as prometheus-adapter reads ``kube_<<.Group>>_<<.Resource>>``, then the longest, for groups with dots
    (``serving_kserve_io_inferenceservice``; label names cannot hold a resource's dashes or dots)."""
    try:
        text = template.render(Struct(Group=_GROUP_MARK, Resource=_RESOURCE_MARK))
    except TemplateError:
        return ()
    if _RESOURCE_MARK not in text:
        return ()
    patterns = []
    for group in ("(?P<group>.*?)", "(?P<group>.*)"):
        out: list[str] = []
        for part in re.split(f"({_GROUP_MARK}|{_RESOURCE_MARK})", text):
            if part == _GROUP_MARK:
                out.append(group if "(?P<group>" not in "".join(out) else "(?P=group)")
            elif part == _RESOURCE_MARK:
                out.append("(?P<resource>.+?)" if "(?P<resource>" not in "".join(out) else "(?P=resource)")
            else:
                out.append(re.escape(part))
        patterns.append(re.compile("^" + "".join(out) + "$"))
    return tuple(patterns) if _GROUP_MARK in text else tuple(patterns[:1])
