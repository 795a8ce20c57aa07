"""The Grafana dashboard's structure: the panels of NVIDIA's dashboard 12239 and the per-namespace, per-pod and HPA
panels are there, every panel has queries on the dashboard's data source, and the layout is consistent. Whether the
queries return data is checked against a real Prometheus in test_live_monitoring.py."""

from __future__ import annotations

import re

from harness.deploy.promql_names import dashboard, panels, queries, variable_query

# grafana.com dashboard 12239 (NVIDIA DCGM Exporter Dashboard): panel title → the series it shows
NVIDIA_12239 = {
    "GPU Temperature": "DCGM_FI_DEV_GPU_TEMP",
    "GPU Avg. Temp": "DCGM_FI_DEV_GPU_TEMP",
    "GPU Power Usage": "DCGM_FI_DEV_POWER_USAGE",
    "GPU Power Total": "DCGM_FI_DEV_POWER_USAGE",
    "GPU SM Clocks": "DCGM_FI_DEV_SM_CLOCK",
    "GPU Utilization": "DCGM_FI_DEV_GPU_UTIL",
    "Tensor Core Utilization": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "GPU Framebuffer Mem Used": "DCGM_FI_DEV_FB_USED",
}
# the panels added for autoscaling: title → (series, the labels its queries group by)
ADDED = {
    "GPU Utilization by Namespace": ("DCGM_FI_DEV_GPU_UTIL", "by (namespace)"),
    "GPU Utilization by Pod": ("DCGM_FI_DEV_GPU_UTIL", "by (namespace, pod)"),
    "Tensor Activity by Namespace": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "by (namespace)"),
    "Tensor Activity by Pod": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "by (namespace, pod)"),
    "GPU Memory Used by Namespace": ("DCGM_FI_DEV_FB_USED", "by (namespace)"),
    "GPU Memory Used by Pod": ("DCGM_FI_DEV_FB_USED", "by (namespace, pod)"),
    "GPU Energy": ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "by (Hostname, gpu)"),
}
GRAFANA_GLOBALS = {"__rate_interval", "__range", "__interval"}


def by_title() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for q in queries(dashboard()):
        out.setdefault(q.panel, []).append(q.expr)
    return out


def test_it_has_the_panels_of_nvidia_12239() -> None:
    exprs = by_title()
    for title, series in NVIDIA_12239.items():
        assert title in exprs, f"panel {title!r} is missing"
        assert all(series in e for e in exprs[title]), title


def test_it_has_per_namespace_and_per_pod_panels() -> None:
    exprs = by_title()
    for title, (series, grouping) in ADDED.items():
        assert title in exprs, f"panel {title!r} is missing"
        assert all(series in e and grouping in e for e in exprs[title]), title


def test_it_shows_the_hpas_current_and_desired_replicas() -> None:
    exprs = " ".join(e for es in by_title().values() for e in es)
    for series in (
        "kube_horizontalpodautoscaler_status_current_replicas",
        "kube_horizontalpodautoscaler_status_desired_replicas",
    ):
        assert series in exprs


def test_every_panel_queries_the_dashboards_data_source() -> None:
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in panels(board):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target["datasource"] == panel["datasource"]


def test_every_variable_used_is_defined() -> None:
    board = dashboard()
    defined = {v["name"] for v in board["templating"]["list"]} | GRAFANA_GLOBALS
    texts = [q.expr for q in queries(board)] + [v.get("definition", "") for v in board["templating"]["list"]]
    used = {m for t in texts for m in re.findall(r"\$\{?([a-zA-Z_][a-zA-Z0-9_]*)", t)}
    assert used <= defined
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            variable_query(variable)
            assert variable["allValue"] == ".*", "'All' must match every value inside =~"


def test_panels_tile_the_24_column_grid_without_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in panels(dashboard()):
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
