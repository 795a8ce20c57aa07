"""How a rule names things: the default ``name.as``; label names ↔ resources."""

from __future__ import annotations

import re

from adapter.errors import TemplateError
from adapter.naming import resources
from adapter.naming.go_regexp import GoRegexp
from adapter.naming.resources import GroupResource, ResourceInfo
from adapter.naming.templates import Struct, Template


def default_as(pattern: GoRegexp, where: str) -> str:
    """What prometheus-adapter uses when ``name.as`` is empty: the whole match, or the only capture group."""
    if pattern.groups == 0:
        return "$0"
    if pattern.groups == 1:
        return "$1"
    raise ValueError(f"{where}: name.matches {pattern.pattern!r} has several capture groups, so name.as is required")


class LabelResourceMapper:
    """Label names to resources and back, from a rule's ``resources.overrides`` and ``resources.template``."""

    def __init__(self, overrides: dict[str, ResourceInfo], template: Template | None) -> None:
        self.overrides = overrides
        self.template = template
        self._by_resource = {info.group_resource: label for label, info in overrides.items()}
        self._pattern = _reverse(template) if template else None

    def resource_for_label(self, label: str) -> ResourceInfo | None:
        if label in self.overrides:
            return self.overrides[label]
        if self._pattern is None:
            return None
        m = self._pattern.match(label)
        if not m:
            return None
        return resources.lookup_sanitized(m.group("resource"), m.groupdict().get("group") or "")

    def label_for_resource(self, gr: GroupResource) -> str | None:
        if gr in self._by_resource:
            return self._by_resource[gr]
        info = resources.lookup(gr.resource, gr.group)
        if self.template is None or info is None:
            return None
        try:
            label = self.template.render(Struct(Group=resources.sanitize_group(gr.group), Resource=info.singular))
        except TemplateError:
            return None
        return label or None


_GROUP_MARK = "\x00group\x00"
_RESOURCE_MARK = "\x00resource\x00"


def _reverse(template: Template) -> re.Pattern[str] | None:
    """A regex recognising the labels ``template`` produces, capturing the group and resource."""
    try:
        text = template.render(Struct(Group=_GROUP_MARK, Resource=_RESOURCE_MARK))
    except TemplateError:
        return None
    if _RESOURCE_MARK not in text:
        return None
    out: list[str] = []
    for part in re.split(f"({_GROUP_MARK}|{_RESOURCE_MARK})", text):
        if part == _GROUP_MARK:
            out.append("(?P<group>.*?)" if "(?P<group>" not in "".join(out) else "(?P=group)")
        elif part == _RESOURCE_MARK:
            out.append("(?P<resource>.+?)" if "(?P<resource>" not in "".join(out) else "(?P=resource)")
        else:
            out.append(re.escape(part))
    return re.compile("^" + "".join(out) + "$")
