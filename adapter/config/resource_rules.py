"""prometheus-adapter's ``resourceRules``: how the CPU and memory of containers and nodes are read from Prometheus to
serve metrics.k8s.io (``kubectl top``, CPU and memory HPAs).

``cpu`` and ``memory`` each give a ``containerQuery`` (per pod, grouped further by ``containerLabel``), a
``nodeQuery`` and the ``resources`` that map labels to pods, nodes and namespaces; ``window`` is the window reported
with every answer (prometheus-adapter reports 0s when it is absent); ``backend`` names the server both are asked
(``backends/backend_specs.py``; without it, ``--prometheus-url``'s). The rules file's loader (``rules.py``) checks the
keys and builds these. As prometheus-adapter, a rule that cannot answer some request (no label for pods, an empty
query) still loads: the loader logs what is missing, and the requests that need it fail saying so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapter.backends.backend_specs import DEFAULT
from adapter.errors import ConfigError, NotConfigured
from adapter.naming import resources
from adapter.naming.names import LabelResourceMapper
from adapter.naming.resources import ResourceInfo
from adapter.naming.templates import Template
from adapter.query.promql import duration_seconds


@dataclass(frozen=True)
class ResourceRule:
    """How one resource (CPU or memory) is read: per container of the requested pods, and per node."""

    where: str
    container_query: Template
    node_query: Template
    mapper: LabelResourceMapper
    container_label: str

    def label(self, info: ResourceInfo) -> str:
        """The label that names pods, nodes or namespaces in this rule's series; ``NotConfigured`` when the rule maps
        none (prometheus-adapter fails such requests too, and loads the file all the same)."""
        label = self.mapper.label_for_resource(info.group_resource)
        if not label:
            raise NotConfigured(
                f"{self.where}.resources maps no label to {info.group_resource}, so metrics.k8s.io cannot answer for "
                f"them (for example overrides: {{{info.singular}: {{resource: {info.singular}}}}})"
            )
        return label

    def problems(self) -> list[str]:
        """What this rule cannot answer, said when the file is loaded."""
        found = []
        for key, template in (("containerQuery", self.container_query), ("nodeQuery", self.node_query)):
            if not template.text.strip():
                found.append(f"{self.where}.{key} is empty: every request that needs it fails")
        for info in (resources.PODS, resources.NAMESPACES, resources.NODES):
            if not self.mapper.label_for_resource(info.group_resource):
                found.append(f"{self.where}.resources maps no label to {info.group_resource}")
        if not self.container_label:
            found.append(f"{self.where}.containerLabel is empty: each pod is answered as one container named ''")
        return found


@dataclass(frozen=True)
class ResourceRules:
    cpu: ResourceRule
    memory: ResourceRule
    window_seconds: float
    backend: str = DEFAULT

    @property
    def window(self) -> str:
        """The window as metrics.k8s.io writes it: a Go duration (``5m0s``)."""
        return go_duration(self.window_seconds)


def parse_window(value: Any, where: str) -> float:
    """``window``: a Prometheus duration (``5m``, ``1m30s``, ``0``) in seconds; 0 when absent, as prometheus-adapter."""
    if value is None:
        return 0.0
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a duration such as 5m, got {type(value).__name__} {value!r}")
    if value == "0":
        return 0.0
    try:
        return duration_seconds(value)
    except ValueError:
        raise ConfigError(f"{where}: {value!r} is not a Prometheus duration such as 30s, 5m or 1h30m") from None


def go_duration(seconds: float) -> str:
    """Go's ``time.Duration.String()`` of a whole number of milliseconds: ``0s``, ``500ms``, ``1.5s``, ``5m0s``,
    ``1h0m0s`` (metav1.Duration marshals so)."""
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    if millis < 1000:
        return f"{millis}ms"
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, fraction = divmod(rest, 1000)
    second = f"{whole}.{fraction:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{second}"
    if minutes:
        return f"{minutes}m{second}"
    return second
