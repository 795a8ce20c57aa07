"""Prometheus misbehaving in ways beyond down and slow: 5xx, invalid JSON, a wrong shape, a huge result.

Each answers the client a 503 Status quickly (never a 500, never a traceback), discovery keeps serving its last good
state, and the adapter recovers by itself once Prometheus behaves again. An answer of the wrong shape is a 503 that
says what was wrong with it (never what it held), counted as a bad answer, while the health probe goes on answering.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.proxy import PrometheusProxy
from harness.waiting import eventually

CM = "/apis/custom.metrics.k8s.io/v1beta2"
TRAINERS = f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer"


def vector(result: object) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def huge_vector(n: int) -> bytes:
    result = [{"metric": {"pod": f"p{i}", "namespace": "ml"}, "value": [1.8e9, "1"]} for i in range(n)]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


FAULTS = {
    "500": (500, b'{"status":"error","errorType":"internal","error":"boom"}'),
    "502 html": (502, b"<html><body>Bad Gateway</body></html>"),
    "503 empty": (503, b""),
    "invalid json": (200, b'{"status":"success","data":{"resultType":"vector","result":[{"metric":'),
    "wrong shape": (200, b'{"status":"success","data":{"resultType":"vector","result":"nope"}}'),
    "not an object": (200, b"[1,2,3]"),
}
SECRET = "s3cr3t"
# answers that are JSON, but not of the shape Prometheus's API gives: the Status names where the shape broke
SHAPES = {
    "metric a string": (
        vector([{"metric": f"pod={SECRET}", "value": [1.8e9, "1"]}]),
        "data.result[0].metric is missing or not an object",
    ),
    "label value a list": (
        vector([{"metric": {"pod": "trainer-0"}, "value": [1.8e9, "1"]}, {"metric": {"pod": [SECRET]}, "value": []}]),
        "data.result[1].metric has a label value that is not a string",
    ),
    "200,000-deep nesting": (
        b'{"status":"success","data":{"resultType":"vector","result":' + b"[" * 200_000 + b"]" * 200_000 + b"}}",
        "the answer is nested too deeply",
    ),
    "value not a pair": (
        vector([{"metric": {}, "value": {"v": SECRET}}]),
        "data.result[0].value is missing or not a [timestamp, value] pair",
    ),
    "result not a list": (vector({"pod": SECRET}), "data.result is not an array"),
    "not an object": (b'"' + SECRET.encode() + b'"', "the answer is not an object"),
}


@pytest.fixture
async def proxied(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: Callable[..., Awaitable[Adapter]], tmp_path: Path
) -> Adapter:
    settings = settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"))
    settings = dataclasses.replace(settings, cache_ttl=0.0)
    settings = dataclasses.replace(settings, prometheus=dataclasses.replace(settings.prometheus, timeout=1.0))
    return await make_adapter(settings)


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_a_misbehaving_prometheus_is_a_503_and_then_recovered_from(
    proxied: Adapter, proxy: PrometheusProxy, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert len((await proxied.get(TRAINERS))["items"]) == 2
    proxy.respond = FAULTS[fault]
    body = await proxied.get(TRAINERS, status=503)
    assert body["kind"] == "Status"
    assert body["reason"] == "ServiceUnavailable"
    assert "Traceback" not in json.dumps(body)
    # discovery keeps its last good catalog through a failed relist
    await proxied.components.discovery.relist()
    resources = await proxied.get(CM)
    assert "pods/gpu_utilization" in {r["name"] for r in resources["resources"]}
    proxy.respond = None

    async def answering() -> bool:
        return (await proxied.client.get(TRAINERS)).status == 200

    await eventually(answering, what="the adapter to answer again")


async def test_a_failing_prometheus_is_logged_once_a_minute_per_rule_not_once_a_request(
    proxied: Adapter, proxy: PrometheusProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """While Prometheus answers 503, every request (and every KEDA stream, asking each second) fails alike."""
    proxy.respond = FAULTS[sorted(FAULTS)[0]]
    caplog.set_level(logging.WARNING, "adapter.provider.provider")
    for _ in range(5):
        await proxied.get(TRAINERS, status=503)
    lines = [r.getMessage() for r in caplog.records if r.name == "adapter.provider.provider"]
    rules = {line.partition(" (series")[0] for line in lines}
    assert lines
    assert len(lines) == len(rules)  # each rule that failed said so once


async def test_a_huge_result_is_answered_or_refused_cleanly(proxied: Adapter, proxy: PrometheusProxy) -> None:
    proxy.respond = (200, huge_vector(200_000))  # ~15 MB of JSON for pods the selector does not even ask for
    resp = await proxied.client.get(TRAINERS)
    assert resp.status in (200, 503)
    body = await resp.json()
    assert body["kind"] in ("MetricValueList", "Status")
    if resp.status == 200:  # only the pods the HPA selected come back, whatever Prometheus sent
        assert {i["describedObject"]["name"] for i in body["items"]} <= {"trainer-0", "trainer-1"}


def bad_answers(adapter: Adapter) -> float:
    registry = adapter.components.metrics.registry
    value = registry.get_sample_value(
        "gpuscale_adapter_prometheus_errors_total", {"endpoint": "query", "kind": "bad_answer"}
    )
    return value or 0.0


@pytest.mark.parametrize("shape", sorted(SHAPES))
async def test_an_answer_of_the_wrong_shape_is_a_503_saying_what_was_wrong(
    proxied: Adapter, proxy: PrometheusProxy, shape: str
) -> None:
    body, problem = SHAPES[shape]
    proxy.respond = (200, body)
    status = await proxied.get(TRAINERS, status=503)
    assert status["reason"] == "ServiceUnavailable"
    assert status["message"] == f"the metrics backend (Prometheus) sent an answer the adapter cannot use: {problem}"
    assert SECRET not in json.dumps(status)
    assert bad_answers(proxied) >= 1
    assert (await proxied.client.get("/healthz")).status == 200
    proxy.respond = None
    assert len((await proxied.get(TRAINERS))["items"]) == 2


@pytest.mark.parametrize("value", ["1e400", "1e999999999", "-1" + "0" * 5000])
async def test_a_value_beyond_float64_is_dropped_as_an_infinity_is(
    proxied: Adapter, proxy: PrometheusProxy, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No Prometheus stores such a value; a server that sends one gets its item left out, quickly, not a frozen
    adapter computing a number of a billion digits."""
    proxy.respond = (
        200,
        vector(
            [
                {"metric": {"pod": "trainer-0", "namespace": "ml"}, "value": [1.8e9, value]},
                {"metric": {"pod": "trainer-1", "namespace": "ml"}, "value": [1.8e9, "42"]},
            ]
        ),
    )
    body = await proxied.get(TRAINERS)
    assert [(i["describedObject"]["name"], i["value"]) for i in body["items"]] == [("trainer-1", "42")]
    dropped = proxied.components.metrics.registry.get_sample_value(
        "gpuscale_adapter_dropped_samples_total", {"reason": "inf"}
    )
    assert dropped == 1
    [line] = [r.getMessage() for r in caplog.records if "dropped gpu_utilization" in r.getMessage()]
    assert line.startswith("dropped gpu_utilization = ")
    assert len(line) < 200  # the value is shown shortened, never 5,000 digits into the log
