import pytest

from adapter.api.paths import CustomRequest, ExternalRequest, ResourceListRequest, parse_metrics_path
from adapter.errors import BadRequest, NotFound
from adapter.naming.resources import GroupResource
from adapter.query.selectors import parse_selector

CM = "/apis/custom.metrics.k8s.io"
EM = "/apis/external.metrics.k8s.io"
NONE = parse_selector("")


def custom(
    version: str,
    resource: str,
    namespace: str | None,
    name: str | None,
    metric: str,
    label: str = "",
    metric_sel: str = "",
) -> CustomRequest:
    return CustomRequest(
        version,
        GroupResource.parse(resource),
        namespace,
        name,
        metric,
        parse_selector(label),
        parse_selector(metric_sel),
    )


@pytest.mark.parametrize(
    ("path", "query", "expected"),
    [
        (f"{CM}/v1beta2", {}, ResourceListRequest("custom.metrics.k8s.io", "v1beta2")),
        (f"{CM}/v1beta1/", {}, ResourceListRequest("custom.metrics.k8s.io", "v1beta1")),
        (f"{EM}/v1beta1", {}, ResourceListRequest("external.metrics.k8s.io", "v1beta1")),
        # namespaced object and wildcard, * literal and percent-encoded as the HPA sends it
        (
            f"{CM}/v1beta2/namespaces/ml/pods/trainer-0/gpu_utilization",
            {},
            custom("v1beta2", "pods", "ml", "trainer-0", "gpu_utilization"),
        ),
        (
            f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization",
            {"labelSelector": "app=trainer"},
            custom("v1beta2", "pods", "ml", None, "gpu_utilization", "app=trainer"),
        ),
        (
            f"{CM}/v1beta2/namespaces/ml/pods/%2A/gpu_utilization",
            {"labelSelector": "app=trainer"},
            custom("v1beta2", "pods", "ml", None, "gpu_utilization", "app=trainer"),
        ),
        (f"{CM}/v1beta1/namespaces/ml/pods/%2a/x", {}, custom("v1beta1", "pods", "ml", None, "x")),
        (
            f"{CM}/v1beta2/namespaces/ml/pods/*/m",
            {"labelSelector": "a in (b,c)", "metricLabelSelector": "gpu=0"},
            custom("v1beta2", "pods", "ml", None, "m", "a in (b,c)", "gpu=0"),
        ),
        # group-resources
        (
            f"{CM}/v1beta2/namespaces/ml/deployments.apps/web/requests",
            {},
            custom("v1beta2", "deployments.apps", "ml", "web", "requests"),
        ),
        # root-scoped object and wildcard
        (
            f"{CM}/v1beta2/nodes/node-a/gpu_utilization",
            {},
            custom("v1beta2", "nodes", None, "node-a", "gpu_utilization"),
        ),
        (
            f"{CM}/v1beta2/nodes/*/gpu_utilization",
            {"labelSelector": "pool=train"},
            custom("v1beta2", "nodes", None, None, "gpu_utilization", "pool=train"),
        ),
        (
            f"{CM}/v1beta2/namespaces/*/gpu_utilization",
            {},
            custom("v1beta2", "namespaces", None, None, "gpu_utilization"),
        ),
        (
            f"{CM}/v1beta2/namespaces/ml/gpu_utilization",
            {},
            custom("v1beta2", "namespaces", None, "ml", "gpu_utilization"),
        ),
        # the Namespace object itself
        (
            f"{CM}/v1beta2/namespaces/ml/metrics/gpu_memory_used",
            {},
            custom("v1beta2", "namespaces", None, "ml", "gpu_memory_used"),
        ),
        # metric names keep their case; names may hold what a URL can encode
        (f"{CM}/v1beta2/namespaces/ml/pods/p/GPU_Util", {}, custom("v1beta2", "pods", "ml", "p", "GPU_Util")),
        (f"{CM}/v1beta2/namespaces/ml/pods/a%2Fb%22c/m", {}, custom("v1beta2", "pods", "ml", 'a/b"c', "m")),
        # external
        (
            f"{EM}/v1beta1/namespaces/ml/queue_depth",
            {"labelSelector": "queue=jobs"},
            ExternalRequest("v1beta1", "ml", "queue_depth", parse_selector("queue=jobs")),
        ),
    ],
)
def test_parse(path: str, query: dict[str, str], expected: object) -> None:
    assert parse_metrics_path(path, query) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/apis",
        "/apis/custom.metrics.k8s.io",
        f"{CM}/v2",
        "/apis/metrics.k8s.io/v1beta1/pods",
        "/apis/metrics.k8s.io/v1beta1",  # resource metrics: resource_routes.py, not these parsers
        "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods/p/m",
        f"{EM}/v1beta2/namespaces/ml/m",
        f"{CM}/v1beta2/pods",
        f"{CM}/v1beta2/pods/p",
        f"{CM}/v1beta2/namespaces/ml/pods/p",
        f"{CM}/v1beta2/namespaces/ml/pods/p/m/extra",
        f"{CM}/v1beta2/namespaces//pods/p/m",
        f"{CM}/v1beta2/namespaces/ml/other/p/m/x/y",
        f"{CM}/v1beta2/namespace/ml/pods/p/m",
        f"{EM}/v1beta1/namespaces/ml",
        f"{EM}/v1beta1/queue_depth",
        f"{EM}/v1beta1/namespaces/ml/queue_depth/x",
    ],
)
def test_shapes_the_apis_do_not_have_are_not_found(path: str) -> None:
    with pytest.raises(NotFound, match="could not find the requested resource"):
        parse_metrics_path(path, {})


@pytest.mark.parametrize(
    ("path", "query", "fragment"),
    [
        (f"{CM}/v1beta2/namespaces/ml/pods/*/m", {"labelSelector": "app=("}, "labelSelector"),
        (f"{CM}/v1beta2/namespaces/ml/pods/*/m", {"metricLabelSelector": "a in (b"}, "metricLabelSelector"),
        (f"{CM}/v1beta2/namespaces/*/pods/*/m", {}, "not '*'"),
        (f"{EM}/v1beta1/namespaces/*/m", {}, "not '*'"),
        (f"{EM}/v1beta1/namespaces/ml/m", {"labelSelector": "x=,"}, "labelSelector"),
        (f"{CM}/v1beta2/namespaces/ml/pods/%FF/m", {}, "percent-encoded UTF-8"),
    ],
)
def test_bad_requests_name_the_problem(path: str, query: dict[str, str], fragment: str) -> None:
    with pytest.raises(BadRequest, match=fragment):
        parse_metrics_path(path, query)
