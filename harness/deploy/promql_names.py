"""The Grafana dashboard's queries, and the metric names and label matchers that queries and rules use.

Queries are read, not parsed: the names this project's rules and panels use have fixed prefixes (dcgm-exporter's
``DCGM_FI_*``, the self-metrics ``gpuscale_*``, kube-state-metrics' ``kube_*``), which a pattern finds reliably.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harness.deploy.manifests import MANIFESTS

DASHBOARD = MANIFESTS / "dashboards" / "gpuscale-gpus.json"
# What the test puts in place of Grafana's variables: every node, GPU and namespace; windows that hold several
# samples at the test's 1 s scrape interval.
SUBSTITUTIONS = {
    "Hostname": ".*",
    "gpu": ".*",
    "namespace": ".*",
    "__rate_interval": "10s",
    "__range": "1m",
    "__interval": "5s",
}
METRIC = re.compile(r"\b(DCGM_FI_[A-Z0-9_]+|gpuscale_[a-z0-9_]+|kube_[a-z0-9_]+|up)\b(?:\{([^}]*)\})?")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


@dataclass(frozen=True)
class Query:
    panel: str
    ref: str
    expr: str
    legend: str

    @property
    def id(self) -> str:
        return f"{self.panel}/{self.ref}"


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those inside collapsed rows."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(board: dict[str, Any]) -> list[Query]:
    return [
        Query(p["title"], t["refId"], t["expr"], t.get("legendFormat", ""))
        for p in panels(board)
        if p["type"] != "row"
        for t in p["targets"]
    ]


def substitute(expr: str) -> str:
    for name in sorted(SUBSTITUTIONS, key=len, reverse=True):
        expr = re.sub(r"\$\{" + name + r"\}|\$" + name + r"\b", SUBSTITUTIONS[name], expr)
    # $1 is label_replace's first capture group, not a variable (Grafana leaves names it does not define alone)
    assert not re.search(r"\$(?!\d)", expr), f"a variable the test does not know: {expr}"
    return expr


def legend_labels(legend: str) -> set[str]:
    return set(re.findall(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}", legend))


@dataclass(frozen=True)
class VariableQuery:
    """A Grafana Prometheus variable: ``label_values(selector, label)``, or ``query_result(expr)`` whose result lines
    (``{labels} value timestamp``) the variable's ``regex`` cuts its values from."""

    selector: str = ""
    label: str = ""
    expr: str = ""
    regex: str = ""


def variable_query(variable: dict[str, Any]) -> VariableQuery:
    definition = variable["definition"].strip()
    if match := re.fullmatch(r"label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)", definition):
        return VariableQuery(selector=match.group(1), label=match.group(2))
    match = re.fullmatch(r"query_result\((.*)\)", definition)
    assert match, f"neither label_values(selector, label) nor query_result(expr): {definition}"
    regex = variable.get("regex", "")
    assert re.fullmatch(r"/.+/", regex), f"query_result without a /regex/: {definition}"
    return VariableQuery(expr=match.group(1), regex=regex[1:-1])


def metric_uses(expr: str) -> Iterator[tuple[str, set[str]]]:
    """(metric name, label names it is matched on) for each selector of a known metric family in ``expr``."""
    for match in METRIC.finditer(expr):
        yield match.group(1), set(MATCHER.findall(match.group(2) or ""))
