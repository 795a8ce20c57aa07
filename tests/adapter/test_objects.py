import json
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.api.objects import (
    ExternalValue,
    MetricValue,
    MetricValueV1beta2,
    ObjectRef,
    ResourceEntry,
    api_resource_list,
    external_value_list,
    metric_value_list,
    render_metric_value_list,
    status,
    timestamp,
)

POD = ObjectRef("Pod", "ns", "p", "v1")
VALUE = MetricValue(POD, "gpu_utilization", None, 1796223030.75, 60, "95500m")


@pytest.mark.parametrize(
    ("version", "item"),
    [
        (
            "v1beta2",
            {
                "describedObject": {"kind": "Pod", "namespace": "ns", "name": "p", "apiVersion": "v1"},
                "metric": {"name": "gpu_utilization", "selector": None},
                "timestamp": "2026-12-02T14:50:30Z",
                "windowSeconds": 60,
                "value": "95500m",
            },
        ),
        (
            "v1beta1",
            {
                "describedObject": {"kind": "Pod", "namespace": "ns", "name": "p", "apiVersion": "v1"},
                "metricName": "gpu_utilization",
                "timestamp": "2026-12-02T14:50:30Z",
                "window": 60,
                "value": "95500m",
                "selector": None,
            },
        ),
    ],
)
def test_metric_value_lists_match_the_contract(version: str, item: dict[str, object]) -> None:
    assert metric_value_list(version, [VALUE]) == {
        "kind": "MetricValueList",
        "apiVersion": f"custom.metrics.k8s.io/{version}",
        "metadata": {},
        "items": [item],
    }


def test_cluster_scoped_objects_have_no_namespace() -> None:
    node = MetricValue(ObjectRef("Node", None, "n", "v1"), "m", {"matchLabels": {"gpu": "0"}}, 0, 120, "1")
    (item,) = cast(list[MetricValueV1beta2], metric_value_list("v1beta2", [node])["items"])
    assert item["describedObject"] == {"kind": "Node", "name": "n", "apiVersion": "v1"}
    assert item["metric"]["selector"] == {"matchLabels": {"gpu": "0"}}
    assert item["windowSeconds"] == 120


def test_external_value_list() -> None:
    body = external_value_list("v1beta1", [ExternalValue("queue_depth", {"queue": "jobs"}, 1796223030, "42")])
    assert body == {
        "kind": "ExternalMetricValueList",
        "apiVersion": "external.metrics.k8s.io/v1beta1",
        "metadata": {},
        "items": [
            {
                "metricName": "queue_depth",
                "metricLabels": {"queue": "jobs"},
                "timestamp": "2026-12-02T14:50:30Z",
                "value": "42",
            }
        ],
    }


def test_status() -> None:
    assert status(404, "NotFound", "the server could not find the metric X for pods") == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the metric X for pods",
        "reason": "NotFound",
        "code": 404,
    }


def test_api_resource_list() -> None:
    body = api_resource_list("custom.metrics.k8s.io", "v1beta2", [ResourceEntry("pods/gpu_utilization", True)])
    assert body == {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "custom.metrics.k8s.io/v1beta2",
        "resources": [
            {
                "name": "pods/gpu_utilization",
                "singularName": "",
                "namespaced": True,
                "kind": "MetricValueList",
                "verbs": ["get"],
            }
        ],
    }


@pytest.mark.parametrize(("seconds", "text"), [(0, "1970-01-01T00:00:00Z"), (1796223030.999, "2026-12-02T14:50:30Z")])
def test_timestamps_are_rfc3339_seconds_in_utc(seconds: float, text: str) -> None:
    assert timestamp(seconds) == text


names = st.text(min_size=1, max_size=20)


@given(
    st.lists(
        st.tuples(
            names, st.sampled_from(["ns", None]), st.sampled_from(["1", "1500m", "95500m"]), st.sampled_from([1.0, 7.9])
        ),
        max_size=8,
    ),
    st.sampled_from(["v1beta1", "v1beta2"]),
    st.sampled_from([None, {"matchLabels": {"gpu": "0"}}]),
)
def test_the_direct_rendering_is_the_json_of_the_objects(
    items: list[tuple[str, str | None, str, float]], version: str, selector: dict[str, object] | None
) -> None:
    values = [
        MetricValue(ObjectRef("Pod" if ns else "Node", ns, name, "v1"), "gpu_utilization", selector, ts, 60, value)
        for name, ns, value, ts in items
    ]
    rendered = render_metric_value_list(version, values)
    assert json.loads(rendered) == metric_value_list(version, values)
    assert (
        rendered == json.dumps(metric_value_list(version, values), separators=(",", ":"), ensure_ascii=False).encode()
    )


def test_rendering_holds_any_metric_name() -> None:
    odd = MetricValue(POD, "@@gpuscale-render-mark-7f3c@@", None, 0, 60, "1")
    assert json.loads(render_metric_value_list("v1beta2", [odd])) == metric_value_list("v1beta2", [odd])
