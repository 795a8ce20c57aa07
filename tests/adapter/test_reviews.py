"""Review caching, SubjectAccessReview bodies and decisions, and the authentication configuration's source, against
an in-memory stand-in for the Kubernetes API (the HTTP side is tested against the fake API server elsewhere)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from adapter.backends.auth_api import ConfigMapState
from adapter.errors import KubernetesError, ResourceExpired, ReviewError
from adapter.security.auth_config import AuthenticationConfig, AuthSettings
from adapter.security.auth_source import AuthConfigSource
from adapter.security.authz import Authorizer, forbidden_message, review_body
from adapter.security.identity import User
from adapter.security.request_info import request_attributes
from adapter.self_metrics import AdapterMetrics
from harness.kube.cluster import Cluster

HPA = User("system:serviceaccount:kube-system:hpa", "u1", ("system:serviceaccounts", "system:authenticated"))
WILDCARD = request_attributes("GET", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/%2A/gpu_utilization")


class ScriptedAPI:
    """Answers reviews from a list of statuses (or exceptions), and the ConfigMap from a list of states."""

    def __init__(self, answers: list[Mapping[str, Any] | Exception] | None = None) -> None:
        self.answers = list(answers or [])
        self.bodies: list[Mapping[str, Any]] = []
        self.reads: list[ConfigMapState | Exception] = []
        self.watches: list[list[ConfigMapState | Exception]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def review(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.bodies.append(body)
        await self.gate.wait()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def read_configmap(self) -> ConfigMapState:
        state = self.reads.pop(0)
        if isinstance(state, Exception):
            raise state
        return state

    async def watch_configmap(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[ConfigMapState]:
        if not self.watches:
            await asyncio.Event().wait()  # a watch with nothing to say stays open
        for event in self.watches.pop(0):
            if isinstance(event, Exception):
                raise event
            yield event

    async def close(self) -> None:
        pass


async def test_identical_reviews_in_flight_are_made_once() -> None:
    api = ScriptedAPI([{"allowed": True}])
    api.gate.clear()
    authorizer = Authorizer(api, 10, 10)
    waiting = [asyncio.ensure_future(authorizer.authorize(HPA, WILDCARD)) for _ in range(5)]
    await asyncio.sleep(0)
    api.gate.set()
    decisions = await asyncio.gather(*waiting)
    assert [d.allowed for d in decisions] == [True] * 5
    assert len(api.bodies) == 1


async def test_decisions_follow_the_review_and_masters_need_none() -> None:
    api = ScriptedAPI(
        [{"allowed": False, "reason": "no RBAC rule"}, {"allowed": True, "denied": True}, {}, ReviewError("down")]
    )
    authorizer = Authorizer(api, 10, 0)
    assert (await authorizer.authorize(HPA, WILDCARD)).reason == "no RBAC rule"
    assert not (await authorizer.authorize(HPA, WILDCARD)).allowed
    assert not (await authorizer.authorize(HPA, WILDCARD)).allowed
    with pytest.raises(ReviewError):
        await authorizer.authorize(HPA, WILDCARD)
    admin = User("system:kube-aggregator", groups=("system:masters",))
    decision = await authorizer.authorize(admin, WILDCARD)
    assert (decision.allowed, decision.source) == (True, "masters")
    assert len(api.bodies) == 4


def test_review_bodies_leave_empty_fields_out() -> None:
    body = review_body(HPA, WILDCARD)
    assert body["apiVersion"] == "authorization.k8s.io/v1"
    assert body["kind"] == "SubjectAccessReview"
    assert body["spec"] == {
        "user": HPA.name,
        "uid": "u1",
        "groups": ["system:serviceaccounts", "system:authenticated"],
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
    spec = review_body(User("x", extra=(("k", ("v",)),)), request_attributes("GET", "/openapi/v3"))["spec"]
    assert spec == {"user": "x", "extra": {"k": ["v"]}, "nonResourceAttributes": {"path": "/openapi/v3", "verb": "get"}}


def test_forbidden_messages_read_like_kubernetes() -> None:
    nodes = request_attributes("GET", "/apis/custom.metrics.k8s.io/v1beta2/nodes/n1/gpu_utilization")
    assert forbidden_message(User("bob"), nodes, "") == (
        'nodes/gpu_utilization.custom.metrics.k8s.io "n1" is forbidden: User "bob" cannot get resource '
        '"nodes/gpu_utilization" in API group "custom.metrics.k8s.io" at the cluster scope'
    )
    external = request_attributes("GET", "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/q")
    assert forbidden_message(User("bob"), external, "not today") == (
        'q.external.metrics.k8s.io is forbidden: User "bob" cannot list resource "q" in API group '
        '"external.metrics.k8s.io" in the namespace "ml": not today'
    )


async def run_until(source: AuthConfigSource, done: Any) -> None:
    task = asyncio.ensure_future(source.watch_configmap())
    try:
        for _ in range(200):
            if done():
                return
            await asyncio.sleep(0)
        raise AssertionError("the source never got there")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_configmap_is_listed_watched_relisted_and_a_broken_change_refused() -> None:
    cluster, metrics, seen = Cluster(), AdapterMetrics(), []
    rotated = Cluster()
    api = ScriptedAPI()
    api.reads = [
        KubernetesError("connection refused"),
        ConfigMapState(cluster.configmap(), "10"),
        ConfigMapState(rotated.configmap(), "30"),
    ]
    api.watches = [
        [ConfigMapState(None, "11", changed=False), ConfigMapState(cluster.configmap(allowed=()), "12")],
        [ConfigMapState(cluster.configmap() | {"requestheader-allowed-names": "x"}, "13"), ResourceExpired("410")],
    ]
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    def collect(config: AuthenticationConfig) -> None:
        seen.append(config)

    source = AuthConfigSource(AuthSettings(), api, metrics, on_change=collect, sleep=sleep, jitter=lambda: 0.0)
    assert not source.loaded
    await run_until(source, lambda: len(seen) == 3)
    assert sleeps == [1.0]
    names = [c.request_header.allowed_names for c in seen if c.request_header]
    assert names == [("front-proxy-client",), (), ("front-proxy-client",)]
    assert seen[-1].trusted_pem() == (rotated.client_ca.pem + rotated.front_proxy_ca.pem).encode()
    assert source.error is None
    registry = metrics.registry
    assert registry.get_sample_value("gpuscale_adapter_auth_config_reloads_total", {"result": "error"}) == 1
    assert registry.get_sample_value("gpuscale_adapter_auth_config_reloads_total", {"result": "success"}) == 2
    assert registry.get_sample_value("gpuscale_adapter_auth_config_loaded") == 1


async def test_an_unreadable_configmap_is_the_readiness_error() -> None:
    api = ScriptedAPI()
    api.reads = [KubernetesError("forbidden; bind the Role")] * 3
    source = AuthConfigSource(AuthSettings(), api, AdapterMetrics(), sleep=lambda _: asyncio.sleep(0))
    await run_until(source, lambda: not api.reads)
    assert not source.loaded
    assert source.error is not None
    assert "forbidden; bind the Role" in source.error
