"""Authentication and authorization over real TLS, as the aggregation layer, the HPA and strangers reach the adapter.

The adapter runs with its production clients against the fake API server (TokenReview, SubjectAccessReview, the
ConfigMap); certificates come from generated CAs shaped like kubeadm's.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import aiohttp
import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID

from adapter.backends.auth_api import KubernetesAuthAPI
from adapter.backends.kube_client import KubeClient
from adapter.settings import parse_settings
from harness.adapter.in_process import MakeSecure
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import CUSTOM, HPA, HPA_REQUEST, HPA_TOKEN, STRANGER_TOKEN, Cluster
from harness.kube.pki import CA
from harness.waiting import eventually

AGGREGATOR = [("X-Remote-User", "system:kube-aggregator"), ("X-Remote-Group", "system:masters")]
AS_HPA = [
    ("X-Remote-User", HPA),
    ("X-Remote-Group", "system:serviceaccounts"),
    ("X-Remote-Group", "system:serviceaccounts:kube-system"),
    ("X-Remote-Extra-Authentication.kubernetes.io%2Fpod-name", "kube-controller-manager-0"),
]


def trainers(body: dict[str, object]) -> dict[str, str]:
    items = body["items"]
    assert isinstance(items, list)
    return {i["describedObject"]["name"]: i["value"] for i in items}


def unauthorized(status: int, body: object) -> bool:
    return status == 401 and body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }


async def test_the_hpa_through_the_front_proxy_is_reviewed_with_its_own_identity(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer
) -> None:
    adapter = await make_secure()
    r = await adapter.get(HPA_REQUEST, cluster.front_proxy, AS_HPA)
    assert r.status == 200, r.text
    assert trainers(r.body) == {"trainer-0": "88", "trainer-1": "40"}
    assert kube.reviews.access_reviews == [
        {
            "user": HPA,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/pod-name": ["kube-controller-manager-0"]},
            "resourceAttributes": {
                "namespace": "ml",
                "verb": "get",
                "group": "custom.metrics.k8s.io",
                "version": "v1beta2",
                "resource": "pods",
                "subresource": "gpu_utilization",
                "name": "*",
            },
        }
    ]
    # the same request again is answered from the review cache
    assert (await adapter.get(HPA_REQUEST, cluster.front_proxy, AS_HPA)).status == 200
    assert len(kube.reviews.access_reviews) == 1


async def test_external_metrics_are_reviewed_as_a_list_of_the_metric(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer
) -> None:
    adapter = await make_secure()
    path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/gpu_utilization"
    r = await adapter.get(path, cluster.front_proxy, AS_HPA)
    assert r.status == 200, r.text
    assert r.body["kind"] == "ExternalMetricValueList"
    assert kube.reviews.access_reviews[-1]["resourceAttributes"] == {
        "namespace": "ml",
        "verb": "list",
        "group": "external.metrics.k8s.io",
        "version": "v1beta1",
        "resource": "gpu_utilization",
    }


async def test_the_aggregators_availability_check_is_allowed_as_system_masters_without_a_review(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer
) -> None:
    adapter = await make_secure()
    for version in ("v1beta2", "v1beta1"):
        r = await adapter.get(f"/apis/custom.metrics.k8s.io/{version}", cluster.front_proxy, AGGREGATOR)
        assert r.status == 200, r.text
        assert r.body["kind"] == "APIResourceList"
    assert kube.reviews.access_reviews == []


async def test_the_aggregators_openapi_fetch_without_groups_is_allowed_through_system_authenticated(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer
) -> None:
    adapter = await make_secure()
    headers = [("X-Remote-User", "system:aggregator"), ("Accept", "application/json")]
    r = await adapter.get("/openapi/v2", cluster.front_proxy, headers)
    assert r.status == 200, r.text
    assert r.body["swagger"] == "2.0"
    assert kube.reviews.access_reviews == [
        {
            "user": "system:aggregator",
            "groups": ["system:authenticated"],
            "nonResourceAttributes": {"path": "/openapi/v2", "verb": "get"},
        }
    ]
    assert (await adapter.get("/openapi/v3", cluster.front_proxy, headers)).status == 200


async def test_a_client_certificate_from_the_client_ca_names_the_user_and_groups_and_headers_are_ignored(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer
) -> None:
    adapter = await make_secure()
    alice = cluster.client_ca.issue("alice", ("metrics-readers", "ml-team"))
    kube.reviews.grant(group="metrics-readers", verbs=("get",), api_groups=("custom.metrics.k8s.io",))
    forged = [("X-Remote-User", "system:kube-aggregator"), ("X-Remote-Group", "system:masters")]
    r = await adapter.get(HPA_REQUEST, alice, forged)
    assert r.status == 200, r.text
    spec = kube.reviews.access_reviews[-1]
    assert spec["user"] == "alice"
    assert spec["groups"] == ["metrics-readers", "ml-team", "system:authenticated"]


async def test_forged_front_proxy_headers_without_a_certificate_are_unauthorized(
    make_secure: MakeSecure, kube: FakeKubeAPIServer
) -> None:
    adapter = await make_secure()
    r = await adapter.get(HPA_REQUEST, None, AGGREGATOR)
    assert unauthorized(r.status, r.body), r.text
    assert kube.reviews.access_reviews == []


async def test_a_front_proxy_certificate_with_a_name_outside_the_allowed_list_is_unauthorized(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer
) -> None:
    adapter = await make_secure()
    impostor = cluster.front_proxy_ca.issue("not-the-front-proxy")
    r = await adapter.get(HPA_REQUEST, impostor, AGGREGATOR)
    assert unauthorized(r.status, r.body), r.text
    # with the allowed list empty, any certificate of the request-header CA is the front proxy
    cluster.publish(kube, cluster.configmap(allowed=()))

    async def accepted() -> bool:
        return (await adapter.get(CUSTOM, impostor, AGGREGATOR)).status == 200

    await eventually(accepted, what="the ConfigMap change to take effect")


async def test_client_certificates_of_unknown_cas_expired_or_for_servers_are_refused_in_the_handshake(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer
) -> None:
    # Python's ssl cannot ask for a certificate without verifying it, so the handshake (which trusts the client CA
    # and the request-header CA, for client use) refuses these: the client gets a TLS alert, no request is served
    adapter = await make_secure()
    refused = [
        CA("someone-elses-ca").issue("front-proxy-client"),
        cluster.front_proxy_ca.issue("front-proxy-client", expired=True),
        cluster.front_proxy_ca.issue("front-proxy-client", usages=(ExtendedKeyUsageOID.SERVER_AUTH,)),
    ]
    for identity in refused:
        with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
            await adapter.get(HPA_REQUEST, identity, AGGREGATOR)
    assert kube.reviews.access_reviews == []
    assert (
        adapter.sample("gpuscale_adapter_request_duration_seconds_count", route="custom_wildcard", code="200") is None
    )
    assert (await adapter.get(HPA_REQUEST, cluster.front_proxy, AGGREGATOR)).status == 200


async def test_a_bearer_token_is_reviewed_then_the_request_authorized_and_both_answers_are_cached(
    make_secure: MakeSecure, kube: FakeKubeAPIServer
) -> None:
    adapter = await make_secure()
    for _ in range(2):
        r = await adapter.get(HPA_REQUEST, token=HPA_TOKEN)
        assert r.status == 200, r.text
        assert trainers(r.body) == {"trainer-0": "88", "trainer-1": "40"}
    assert kube.reviews.token_reviews == 1
    assert len(kube.reviews.access_reviews) == 1
    spec = kube.reviews.access_reviews[0]
    assert (spec["user"], spec["uid"]) == (HPA, "hpa-uid")
    assert spec["groups"][-1] == "system:authenticated"
    assert adapter.sample("gpuscale_adapter_authentications_total", method="token", result="success") == 2
    assert adapter.sample("gpuscale_adapter_authorizations_total", decision="allowed", source="cache") == 1


async def test_an_invalid_token_or_another_scheme_is_unauthorized(
    make_secure: MakeSecure, kube: FakeKubeAPIServer
) -> None:
    adapter = await make_secure()
    r = await adapter.get(HPA_REQUEST, token="not-a-token-anyone-issued")
    assert unauthorized(r.status, r.body), r.text
    r = await adapter.get(HPA_REQUEST, headers={"Authorization": "Basic YWRtaW46YWRtaW4="})
    assert unauthorized(r.status, r.body), r.text
    assert kube.reviews.token_reviews == 1
    assert kube.reviews.access_reviews == []


async def test_a_denied_review_is_403_in_kubernetes_words(make_secure: MakeSecure) -> None:
    adapter = await make_secure()
    r = await adapter.get(HPA_REQUEST, token=STRANGER_TOKEN)
    assert r.status == 403, r.text
    assert r.body["kind"] == "Status"
    assert r.body["reason"] == "Forbidden"
    assert r.body["message"] == (
        'pods/gpu_utilization.custom.metrics.k8s.io "*" is forbidden: User "stranger" cannot get resource '
        '"pods/gpu_utilization" in API group "custom.metrics.k8s.io" in the namespace "ml"'
    )
    r = await adapter.get("/metrics", token=STRANGER_TOKEN)
    assert r.status == 403
    assert r.body["message"] == 'forbidden: User "stranger" cannot get path "/metrics"'


async def test_health_endpoints_are_open_and_everything_else_needs_credentials(make_secure: MakeSecure) -> None:
    adapter = await make_secure()
    for path in ("/healthz", "/livez", "/readyz"):
        r = await adapter.get(path)
        assert (r.status, r.text) == (200, "ok"), path
    r = await adapter.get("/readyz?verbose")
    assert r.text == (
        "[+]discovery ok\n[+]object-cache ok\n[+]authentication ok\n[+]serving-certificate ok\nreadyz check passed\n"
    )
    for path in ("/metrics", "/apis", "/openapi/v2", "/explain/apis/custom.metrics.k8s.io/v1beta2", "/nothing"):
        r = await adapter.get(path)
        assert unauthorized(r.status, r.body), path
    assert adapter.sample("gpuscale_adapter_errors_total", route="metrics", reason="Unauthorized") == 1


async def test_authorization_always_allow_paths_opens_the_paths_it_names(make_secure: MakeSecure) -> None:
    """The health paths are open whatever the flag says (the kubelet's probes carry no credentials)."""
    flag = "--authorization-always-allow-paths=/metrics,/openapi/*"
    given = parse_settings(["--prometheus-url=http://127.0.0.1:9", flag])
    adapter = await make_secure(always_allow_paths=given.auth.always_allow_paths)
    for path in ("/metrics", "/openapi/v2", "/healthz"):
        r = await adapter.get(path)
        assert r.status == 200, (path, r.text)
    r = await adapter.get("/apis")
    assert unauthorized(r.status, r.body)


@pytest.mark.parametrize("failure", ["error", "timeout", "unreachable"])
async def test_a_review_that_cannot_be_made_is_503_never_allowed(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer, failure: str, tmp_path: Path
) -> None:
    # the adapter's own client, with a shorter deadline than the default 10 s
    api = KubernetesAuthAPI(await KubeClient.connect(kube.kubeconfig(tmp_path / "review-kubeconfig"), 0.5))
    try:
        adapter = await make_secure(auth_api=api)
        if failure == "error":
            kube.reviews.failures = 2
        elif failure == "timeout":
            kube.reviews.delay = 2.0
        else:
            api.client.api_client.configuration.host = "http://127.0.0.1:9"
        for request in ({"identity": cluster.front_proxy, "headers": AS_HPA}, {"token": HPA_TOKEN}):
            r = await adapter.get(HPA_REQUEST, **request)
            assert r.status == 503, r.text
            assert r.body["reason"] == "ServiceUnavailable"
            assert (
                r.body["message"]
                == "the Kubernetes API is currently unavailable to authenticate or authorize the request"
            )
        # failures are not cached: once the API answers again, so does the adapter
        kube.reviews.failures, kube.reviews.delay = 0, 0.0
        api.client.api_client.configuration.host = kube.url
        r = await adapter.get(HPA_REQUEST, cluster.front_proxy, AS_HPA)
        assert r.status == 200, r.text
    finally:
        await api.close()


async def test_no_answer_log_line_or_metric_carries_a_token_or_a_key(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    adapter = await make_secure()
    bodies = []
    for token in (HPA_TOKEN, STRANGER_TOKEN, "unknown-token-5c3e1a9f7d2b4e6a8c0f"):
        bodies.append((await adapter.get(HPA_REQUEST, token=token)).text)
    kube.reviews.failures = 2
    bodies.append((await adapter.get(HPA_REQUEST, token="fresh-token-7a1c3e5f9b2d4f6a8e0c")).text)
    bodies.append((await adapter.get(HPA_REQUEST, cluster.front_proxy, AS_HPA)).text)
    bodies.append((await adapter.get("/metrics", cluster.front_proxy, AGGREGATOR)).text)
    secrets = [HPA_TOKEN, STRANGER_TOKEN, "unknown-token-5c3e1a9f7d2b4e6a8c0f", "fresh-token-7a1c3e5f9b2d4f6a8e0c"]
    keys = [cluster.front_proxy.key_pem, (adapter.server_ca.parent / "apiserver.key").read_bytes()]
    key_lines = [line.decode() for key in keys for line in key.splitlines() if b"PRIVATE KEY" not in line]
    assert "Forbidden" in bodies[1]
    assert "ServiceUnavailable" in bodies[3]
    assert "TokenReview" in caplog.text, "the review failure is logged"
    for text in [caplog.text, *bodies]:
        for secret in secrets + key_lines:
            assert secret not in text
        assert "PRIVATE KEY" not in text


async def test_explain_is_authorized_as_the_request_it_explains(
    make_secure: MakeSecure, kube: FakeKubeAPIServer
) -> None:
    """A caller allowed /explain/* reads through it only what it may ask for itself."""
    adapter = await make_secure(unauthorized_ttl=0.0, authorized_ttl=0.0)
    kube.reviews.grant(user="stranger", paths=("/explain/*",))
    r = await adapter.get("/explain" + HPA_REQUEST, token=STRANGER_TOKEN)
    assert r.status == 403, r.text
    assert r.body["message"].startswith('pods/gpu_utilization.custom.metrics.k8s.io "*" is forbidden: User "stranger"')
    explained = kube.reviews.access_reviews[-1]["resourceAttributes"]
    assert (explained["namespace"], explained["resource"], explained["subresource"]) == (
        "ml",
        "pods",
        "gpu_utilization",
    )
    kube.reviews.grant(user="stranger", api_groups=("custom.metrics.k8s.io",), resources=("pods/*",), namespace="ml")
    r = await adapter.get("/explain" + HPA_REQUEST, token=STRANGER_TOKEN)
    assert r.status == 200, r.text
    kube.reviews.grants = [g for g in kube.reviews.grants if g.paths != ("/explain/*",)]
    r = await adapter.get("/explain" + HPA_REQUEST, token=STRANGER_TOKEN)
    assert r.status == 403  # the explain endpoint itself still needs its own permission


@pytest.mark.parametrize("spelling", ["Pods", "pod", "PODS", "Pod"])
async def test_a_resource_spelt_otherwise_is_reviewed_as_the_resource_it_is_answered_as(
    make_secure: MakeSecure, kube: FakeKubeAPIServer, spelling: str
) -> None:
    adapter = await make_secure(unauthorized_ttl=0.0)
    kube.reviews.grant(user="stranger", api_groups=("custom.metrics.k8s.io",), resources=("pods/*",), namespace="ml")
    r = await adapter.get(HPA_REQUEST.replace("/pods/", f"/{spelling}/"), token=STRANGER_TOKEN)
    assert r.status == 200, r.text  # answered with pods' data, so reviewed as pods, as RBAC names them
    assert kube.reviews.access_reviews[-1]["resourceAttributes"]["resource"] == "pods"


async def test_a_keda_question_explained_over_http_is_authorized_as_the_request_it_asks(
    make_secure: MakeSecure, kube: FakeKubeAPIServer
) -> None:
    """/explain/keda/NAMESPACE reads what the trigger's HTTP question reads: a caller allowed /explain/* and ml's
    pod metrics reads ml's through it, and not serving's."""
    adapter = await make_secure(unauthorized_ttl=0.0, authorized_ttl=0.0)
    kube.reviews.grant(user="stranger", paths=("/explain/*",))
    kube.reviews.grant(user="stranger", api_groups=("custom.metrics.k8s.io",), resources=("pods/*",), namespace="ml")
    question = "?metricName=gpu_utilization&labelSelector=app%3Dtrainer&targetValue=70"
    r = await adapter.get("/explain/keda/ml" + question, token=STRANGER_TOKEN)
    assert r.status == 200, r.text
    assert {i["describedObject"]["name"] for i in r.body["answer"]["items"]} == {"trainer-0", "trainer-1"}
    r = await adapter.get("/explain/keda/serving" + question, token=STRANGER_TOKEN)
    assert r.status == 403, r.text
    assert r.body["message"].startswith('pods/gpu_utilization.custom.metrics.k8s.io "*" is forbidden: User "stranger"')
    explained = kube.reviews.access_reviews[-1]["resourceAttributes"]
    assert (explained["namespace"], explained["resource"], explained["subresource"]) == (
        "serving",
        "pods",
        "gpu_utilization",
    )
    r = await adapter.get("/explain/keda/ml?metricName=gpu_utilization", token=STRANGER_TOKEN)
    assert r.status == 400, r.text  # reviewed as its own path, then told what the scaler would refuse
    r = await adapter.get("/explain/keda/ml" + question)
    assert unauthorized(r.status, r.body)
