"""The series peers read that the adapter does not serve, computed from scrapes as policies.EXTRA_METRICS defines
them, on values worked by hand."""

import pytest

from loadgen.replay.pipeline import EngineSample, GatewaySample, Scrape
from loadgen.replay.served import ServedMetrics


def engine(pod: str, waiting: float, running: float, kv: float, namespace: str = "ns") -> EngineSample:
    return EngineSample(namespace, pod, "node", waiting, running, kv, 0.0, 0.0, 0.0, 0.0, 0.0)


def served(*engines: EngineSample, requests: float = 0.0) -> ServedMetrics:
    metrics = ServedMetrics("ns")
    gateway = GatewaySample("ns", "gateway", 0.0, requests)
    metrics.scrape(Scrape(15.0, engines, (), (gateway,)))
    return metrics


def test_in_flight_is_the_namespaces_waiting_and_running_summed() -> None:
    m = served(engine("a", 2, 10, 0.5), engine("b", 1, 7, 0.2), engine("x", 50, 50, 0.9, namespace="other"))
    assert m.external_metric("inference_gateway_requests_running", 15.0) == 20.0


def test_pool_saturation_is_the_most_saturated_replica() -> None:
    # a: 2 waiting of 5 = 0.4, KV 0.5 of 0.8 = 0.625; b: 6 of 5 = 1.2
    m = served(engine("a", 2, 10, 0.5), engine("b", 6, 3, 0.1))
    assert m.external_metric("inference_pool_saturation", 15.0) == 1.2
    assert served(engine("a", 0, 10, 0.72)).external_metric("inference_pool_saturation", 15.0) == pytest.approx(0.9)


def test_pool_saturation_with_no_ready_replica_is_one() -> None:
    assert served().external_metric("inference_pool_saturation", 15.0) == 1.0


def test_request_activity_is_one_while_requests_arrive() -> None:
    metrics = ServedMetrics("ns")
    for at, total in ((15.0, 0.0), (30.0, 0.0), (45.0, 3.0)):
        metrics.scrape(Scrape(at, (), (), (GatewaySample("ns", "gateway", 0.0, total),)))
    assert metrics.external_metric("inference_request_activity", 30.0) == 0.0
    assert metrics.external_metric("inference_request_activity", 45.0) == 1.0


def test_pods_metrics_are_those_of_the_namespace() -> None:
    m = served(engine("a", 2, 10, 0.5), engine("x", 50, 50, 0.9, namespace="other"))
    assert m.pods_metric("inference_requests_running", 15.0) == {"a": 10.0}


def test_each_scrape_records_the_replicas_worth_of_kv_cache_what_arrives_needs() -> None:
    metrics = served(engine("a", 0, 3, 0.5), engine("b", 0, 3, 0.3), engine("x", 0, 3, 0.9, namespace="other"))
    # no rate yet: the capacity demand is the mean KV use, 40 %, on the namespace's 2 engines
    [(at, replicas)] = metrics.recorded
    assert at == 15.0
    assert replicas == pytest.approx(0.8)
    assert ServedMetrics("ns").recorded == []


def test_the_forecast_is_yesterdays_most_from_now_to_five_minutes_ahead() -> None:
    yesterday = [(0.0, 2.0), (15.0, 2.0), (300.0, 20.0), (315.0, 3.0)]
    metrics = ServedMetrics("ns", history=yesterday)
    assert metrics.external_metric("inference_capacity_forecast", 0.0) == 2000  # [0, 300], both ends in
    assert metrics.external_metric("inference_capacity_forecast", 16.0) == 2000
    assert metrics.external_metric("inference_capacity_forecast", 301.0) == 300
    # past yesterday's record: 0 while today has one (an engine), none without
    assert metrics.external_metric("inference_capacity_forecast", 700.0) is None
    metrics.scrape(Scrape(700.0, (engine("a", 0, 1, 0.5),), (), ()))
    assert metrics.external_metric("inference_capacity_forecast", 700.0) == 0
    assert ServedMetrics("ns").external_metric("inference_capacity_forecast", 0.0) is None
