"""Request attributes for SubjectAccessReviews, as Kubernetes' RequestInfoFactory derives them."""

import pytest

from adapter.naming.resources import BUILT_IN
from adapter.security.request_info import RequestAttributes, request_attributes, reviewed

CM = "/apis/custom.metrics.k8s.io/v1beta2"
EM = "/apis/external.metrics.k8s.io/v1beta1"


def resource(
    verb: str, group: str, version: str, namespace: str, res: str, sub: str, name: str, path: str
) -> RequestAttributes:
    return RequestAttributes(verb, path, True, group, version, namespace, res, sub, name)


@pytest.mark.parametrize(
    ("method", "raw", "expected"),
    [
        (
            "GET",
            f"{CM}/namespaces/ml/pods/%2A/gpu_utilization",
            resource("get", "custom.metrics.k8s.io", "v1beta2", "ml", "pods", "gpu_utilization", "*",
                     f"{CM}/namespaces/ml/pods/*/gpu_utilization"),
        ),
        (
            "GET",
            f"{CM}/namespaces/ml/deployments.apps/trainer/gpu_utilization",
            resource("get", "custom.metrics.k8s.io", "v1beta2", "ml", "deployments.apps", "gpu_utilization",
                     "trainer", f"{CM}/namespaces/ml/deployments.apps/trainer/gpu_utilization"),
        ),
        (
            "GET",
            f"{CM}/nodes/node-a/gpu_utilization",
            resource("get", "custom.metrics.k8s.io", "v1beta2", "", "nodes", "gpu_utilization", "node-a",
                     f"{CM}/nodes/node-a/gpu_utilization"),
        ),
        (
            "GET",
            f"{CM}/namespaces/ml/metrics/gpu_utilization",
            resource("get", "custom.metrics.k8s.io", "v1beta2", "ml", "metrics", "", "gpu_utilization",
                     f"{CM}/namespaces/ml/metrics/gpu_utilization"),
        ),
        (
            "GET",
            f"{CM}/namespaces/ml",
            resource("get", "custom.metrics.k8s.io", "v1beta2", "ml", "namespaces", "", "ml", f"{CM}/namespaces/ml"),
        ),
        (
            "GET",
            f"{EM}/namespaces/ml/queue_depth",
            resource("list", "external.metrics.k8s.io", "v1beta1", "ml", "queue_depth", "", "",
                     f"{EM}/namespaces/ml/queue_depth"),
        ),
        (
            "GET",
            f"{CM}/namespaces/ml/pods/a%2Fb/gpu_utilization",
            resource("get", "custom.metrics.k8s.io", "v1beta2", "ml", "pods", "gpu_utilization", "a/b",
                     f"{CM}/namespaces/ml/pods/a/b/gpu_utilization"),
        ),
        ("POST", f"{CM}/nodes/n/m", resource("create", "custom.metrics.k8s.io", "v1beta2", "", "nodes", "m", "n",
                                             f"{CM}/nodes/n/m")),
        ("GET", "/apis", RequestAttributes("get", "/apis")),
        ("GET", "/apis/custom.metrics.k8s.io", RequestAttributes("get", "/apis/custom.metrics.k8s.io")),
        ("GET", CM, RequestAttributes("get", CM)),
        ("GET", f"{CM}/", RequestAttributes("get", f"{CM}/")),
        ("HEAD", "/openapi/v2", RequestAttributes("get", "/openapi/v2")),
        ("GET", "/metrics", RequestAttributes("get", "/metrics")),
        ("DELETE", "/metrics", RequestAttributes("delete", "/metrics")),
        ("GET", "/", RequestAttributes("get", "/")),
    ],
)  # fmt: skip
def test_attributes(method: str, raw: str, expected: RequestAttributes) -> None:
    assert request_attributes(method, raw) == expected


def test_a_list_asked_to_be_watched_is_the_verb_watch_and_one_object_stays_a_get() -> None:
    # as the API server's RequestInfo reads ?watch=true: authorized as watch, then refused 405 by the handler
    assert request_attributes("GET", "/apis/metrics.k8s.io/v1beta1/pods", watch=True).verb == "watch"
    assert request_attributes("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods", watch=True).verb == "watch"
    # a custom metric of every pod names them "*", a name to RequestInfo: a get
    assert request_attributes("GET", f"{CM}/namespaces/ml/pods/*/gpu_utilization", watch=True).verb == "get"
    assert request_attributes("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods/a", watch=True).verb == "get"


CM_ML = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml"


@pytest.mark.parametrize(
    ("segment", "resource"),
    [("pods", "pods"), ("Pods", "pods"), ("pod", "pods"), ("PODS", "pods"), ("Pod", "pods"),
     ("deployments.apps", "deployments.apps"), ("Deployment", "deployments.apps"), ("widgets", "widgets")],
)  # fmt: skip
def test_a_custom_metrics_resource_is_reviewed_as_the_mapping_resolves_it(segment: str, resource: str) -> None:
    [attrs] = reviewed("GET", f"{CM_ML}/{segment}/%2A/gpu_utilization", BUILT_IN)
    assert (attrs.resource, attrs.subresource, attrs.name) == (resource, "gpu_utilization", "*")  # unknown: as sent


def test_the_namespace_form_and_other_groups_are_reviewed_as_sent() -> None:
    [namespace] = reviewed("GET", f"{CM_ML}/metrics/gpu_utilization", BUILT_IN)
    assert (namespace.resource, namespace.name) == ("metrics", "gpu_utilization")
    [external] = reviewed("GET", "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/pods", BUILT_IN)
    assert (external.verb, external.resource) == ("list", "pods")  # an external metric named pods, not the resource
    [as_sent] = reviewed("GET", f"{CM_ML}/Pods/%2A/m", None)  # no mapping read yet
    assert as_sent.resource == "Pods"


def test_explain_is_reviewed_as_its_path_and_as_the_request_it_explains() -> None:
    own, explained = reviewed("GET", f"/explain{CM_ML}/Pods/%2A/gpu_utilization", BUILT_IN)
    assert (own.resource_request, own.path) == (False, f"/explain{CM_ML}/Pods/*/gpu_utilization")
    assert (explained.namespace, explained.resource, explained.subresource) == ("ml", "pods", "gpu_utilization")
