"""The stand-in aggregation layer's order of a group's APIServices (harness/kube/aggregator.py), which decides the
preferred version that discovery lists first and kubectl top asks for."""

import ssl

from harness.kube.aggregator import Aggregator, APIService, Endpoints, kube_aware_order


def test_versions_sort_as_the_kubernetes_docs_list_them() -> None:
    # the example order of "Version priority" in the CustomResourceDefinition versioning page
    expected = ["v10", "v2", "v1", "v11beta2", "v10beta3", "v3beta1", "v12alpha1", "v11alpha2", "foo1", "foo10"]
    assert sorted(reversed(expected), key=kube_aware_order) == expected


def test_a_groups_versions_go_by_version_priority_then_by_version() -> None:
    tls = ssl.create_default_context()
    aggregator = Aggregator()

    def add(group: str, version: str, priority: int = 100) -> None:
        aggregator.services.append(APIService(group, version, Endpoints(), tls, priority))

    add("metrics.k8s.io", "v1beta1")
    add("custom.metrics.k8s.io", "v1beta1", 100)
    add("metrics.k8s.io", "v1")
    add("custom.metrics.k8s.io", "v1beta2", 200)
    assert aggregator.group_versions() == [
        ("metrics.k8s.io", "v1"),  # equal priorities: GA above beta
        ("metrics.k8s.io", "v1beta1"),
        ("custom.metrics.k8s.io", "v1beta2"),
        ("custom.metrics.k8s.io", "v1beta1"),
    ]
    aggregator.services[0] = APIService("metrics.k8s.io", "v1beta1", Endpoints(), tls, 200)
    assert aggregator.group_versions()[:2] == [("metrics.k8s.io", "v1beta1"), ("metrics.k8s.io", "v1")]
