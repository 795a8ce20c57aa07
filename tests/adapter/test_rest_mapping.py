"""The REST mapping (pure): names to resources as client-go's priority mapper resolves them, label names to resources
as prometheus-adapter's rules map them, and the discovery documents it is read from."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.backends.api_resources import (
    aggregated_resources,
    in_priority_order,
    legacy_group_versions,
    legacy_resources,
)
from adapter.config.rules import parse_rules
from adapter.naming.resources import BUILT_IN, GroupResource, ResourceInfo, RestMapping


def info(
    resource: str, singular: str, kind: str, group: str = "", version: str = "v1", ns: bool = True
) -> ResourceInfo:
    return ResourceInfo(GroupResource(resource, group), singular, kind, version, ns)


EVENTS = info("events", "event", "Event")
EVENTS_K8S = info("events", "event", "Event", "events.k8s.io")
DEPLOYMENTS = info("deployments", "deployment", "Deployment", "apps")
JOBS = info("jobs", "job", "Job", "batch")
RAY = info("rayclusters", "raycluster", "RayCluster", "ray.io")
ISVC = info("inferenceservices", "inferenceservice", "InferenceService", "serving.kserve.io", "v1beta1")
MAPPING = RestMapping([info("pods", "pod", "Pod"), EVENTS, DEPLOYMENTS, EVENTS_K8S, JOBS, RAY, ISVC])


@pytest.mark.parametrize(
    ("resource", "group", "expected"),
    [
        ("deployments", "apps", DEPLOYMENTS),
        ("deployment", "", DEPLOYMENTS),  # an empty group matches any group
        ("Deployment", "", DEPLOYMENTS),  # the kind, any case
        ("deployments", "batch", None),
        ("events", "", EVENTS),  # the core group comes first
        ("events", "events.k8s.io", EVENTS_K8S),
        ("rayclusters.ray.io", "", RAY),  # the group named in the resource, as kubectl writes it
        ("raycluster", "", RAY),
        ("inferenceservices", "serving.kserve.io", ISVC),
        ("gizmos", "", None),
    ],
)
def test_lookup(resource: str, group: str, expected: ResourceInfo | None) -> None:
    assert MAPPING.lookup(resource, group) == expected


def test_a_later_version_of_a_resource_does_not_replace_the_preferred_one() -> None:
    older = info("deployments", "deployment", "Deployment", "apps", "v1beta2")
    mapping = RestMapping([DEPLOYMENTS, older])
    assert mapping.lookup("deployments", "apps") == DEPLOYMENTS
    assert len(mapping) == 1


def test_lookup_sanitized_reads_groups_a_label_template_wrote() -> None:
    assert MAPPING.lookup_sanitized("inferenceservice", "serving_kserve_io") == ISVC
    assert MAPPING.lookup_sanitized("raycluster", "ray_io") == RAY
    assert MAPPING.lookup_sanitized("deployment", "apps") == DEPLOYMENTS
    assert MAPPING.lookup_sanitized("job", "") == JOBS
    assert MAPPING.lookup_sanitized("job", "apps") is None


RULES = parse_rules(
    """
rules:
- seriesQuery: 'a{namespace!=""}'
  resources: {template: "<<.Resource>>"}
- seriesQuery: 'b{namespace!=""}'
  resources:
    template: "kube_<<.Group>>_<<.Resource>>"
    overrides: {namespace: {resource: namespace}, rc: {group: ray.io, resource: raycluster}, d: {resource: deployment}}
""",
    "cfg",
)


@pytest.mark.parametrize(
    ("rule", "label", "expected"),
    [
        (0, "job", JOBS),  # prometheus-adapter maps a scrape's job label to jobs.batch too
        (0, "deployment", DEPLOYMENTS),
        (0, "deployments", DEPLOYMENTS),
        (0, "raycluster", RAY),
        (0, "instance", None),
        (1, "kube_apps_deployment", DEPLOYMENTS),
        (1, "kube_serving_kserve_io_inferenceservice", ISVC),  # a group with dots: the longest group is tried too
        (1, "kube_ray_io_raycluster", RAY),
        (1, "rc", RAY),
        (1, "d", DEPLOYMENTS),
        (1, "kube_apps_gizmo", None),
    ],
)
def test_labels_name_resources_through_the_mapping(rule: int, label: str, expected: ResourceInfo | None) -> None:
    assert RULES.rules[rule].resource_for_label(label, MAPPING) == expected


def test_the_label_of_a_resource_is_its_override_or_the_template_of_its_singular() -> None:
    templated, overridden = RULES.rules
    assert templated.label_for(RAY, MAPPING) == "raycluster"
    assert overridden.label_for(RAY, MAPPING) == "rc"
    assert overridden.label_for(ISVC, MAPPING) == "kube_serving_kserve_io_inferenceservice"
    # an override of a resource the mapping does not know resolves to nothing, and names no label
    assert overridden.label_for(RAY, BUILT_IN) is None
    assert overridden.resource_for_label("rc", BUILT_IN) is None


def test_declared_metrics_follow_the_mapping() -> None:
    rule = parse_rules(
        "rules:\n- seriesQuery: 'ray_up{namespace!=\"\"}'\n"
        "  resources: {overrides: {namespace: {resource: namespace}, rc: {group: ray.io, resource: rayclusters}}}",
        "cfg",
    ).rules[0]
    assert rule.declared(BUILT_IN) == [("ray_up", "ray_up", (("namespace", BUILT_IN.lookup("namespaces")),))]
    [declared] = rule.declared(RestMapping([*BUILT_IN, RAY]))
    assert [(label, i.group_resource) for label, i in declared[2]] == [
        ("namespace", GroupResource("namespaces")),
        ("rc", GroupResource("rayclusters", "ray.io")),
    ]


AGGREGATED: dict[str, Any] = {
    "kind": "APIGroupDiscoveryList",
    "apiVersion": "apidiscovery.k8s.io/v2",
    "metadata": {},
    "items": [
        {
            "metadata": {"name": "autoscaling", "creationTimestamp": None},
            "versions": [
                {
                    "version": "v2",
                    "resources": [
                        {
                            "resource": "horizontalpodautoscalers",
                            "responseKind": {"group": "", "version": "", "kind": "HorizontalPodAutoscaler"},
                            "scope": "Namespaced",
                            "singularResource": "horizontalpodautoscaler",
                            "verbs": ["get", "list"],
                            "subresources": [{"subresource": "status", "verbs": ["get"]}],
                        }
                    ],
                    "freshness": "Current",
                },
                {"version": "v1", "resources": [], "freshness": "Current"},
            ],
        },
        {
            "metadata": {"name": "metrics.k8s.io", "creationTimestamp": None},
            "versions": [{"version": "v1beta1", "freshness": "Stale"}],
        },
        {
            "metadata": {"name": "ray.io", "creationTimestamp": None},
            "versions": [
                {
                    "version": "v1",
                    "resources": [
                        {
                            "resource": "rayclusters",
                            "responseKind": {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
                            "scope": "Namespaced",
                            "singularResource": "",
                            "verbs": ["list"],
                        },
                        {"resource": "parentless", "scope": "Cluster", "verbs": []},  # subresources only: no kind
                    ],
                }
            ],
        },
    ],
}


def test_an_aggregated_document_gives_resources_and_stale_group_versions() -> None:
    failed: dict[tuple[str, str], str] = {}
    found = list(aggregated_resources(AGGREGATED, failed))
    assert [(group, preferred, [i.group_resource.resource for i in infos]) for group, preferred, infos in found] == [
        ("autoscaling", True, ["horizontalpodautoscalers"]),
        ("autoscaling", False, []),
        ("ray.io", True, ["rayclusters"]),
    ]
    assert set(failed) == {("metrics.k8s.io", "v1beta1")}
    hpa, ray = found[0][2][0], found[2][2][0]
    assert (hpa.kind, hpa.version, hpa.namespaced, hpa.api_version) == (
        "HorizontalPodAutoscaler",
        "v2",
        True,
        "autoscaling/v2",
    )
    assert ray.singular == "raycluster"  # none given: the kind in lower case, as client-go guesses


def test_legacy_documents_give_the_same_resources() -> None:
    versions = legacy_group_versions(
        {"kind": "APIVersions", "versions": ["v1"]},
        {
            "kind": "APIGroupList",
            "groups": [
                {
                    "name": "autoscaling",
                    "versions": [{"groupVersion": "autoscaling/v1", "version": "v1"}, {"version": "v2"}],
                    "preferredVersion": {"groupVersion": "autoscaling/v2", "version": "v2"},
                }
            ],
        },
    )
    assert versions == [("", "v1", True), ("autoscaling", "v2", True), ("autoscaling", "v1", False)]
    listed = legacy_resources(
        "",
        "v1",
        {
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                {"name": "pods", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["list"]},
                {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
                {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node", "verbs": ["list"]},
            ],
        },
    )
    assert listed == [info("pods", "pod", "Pod"), info("nodes", "node", "Node", ns=False)]


def test_priority_puts_the_core_group_then_preferred_versions_first() -> None:
    older_only = info("widgets", "widget", "Widget", "a.example", "v1beta1")
    preferred = info("widgets", "widget", "Widget", "b.example", "v1")
    ordered = in_priority_order(
        [
            ("a.example", True, [info("things", "thing", "Thing", "a.example")]),
            ("a.example", False, [older_only]),
            ("b.example", True, [preferred]),
            ("", True, [EVENTS]),
        ]
    )
    assert ordered[0] == EVENTS
    # client-go asks every group's preferred version before any other version
    assert RestMapping(ordered).lookup("widgets") == preferred
