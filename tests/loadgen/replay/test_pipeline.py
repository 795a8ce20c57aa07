"""The metric pipeline: Prometheus 2.42's rate() and instant vectors, staleness, and the built-in rules' filters and
aggregations, each value worked out by hand below from promql/functions.go's extrapolatedRate and
adapter/default-rules.yaml. tests/loadgen/replay/test_pipeline_prometheus.py holds the same answers against a real
Prometheus and the adapter."""

from __future__ import annotations

import math

import pytest

from loadgen.replay.pipeline import (
    EngineSample,
    GatewaySample,
    GpuSample,
    MetricPipeline,
    Scrape,
    extrapolated_rate,
    served,
)

NS = "llm"


def engine(pod: str, **values: float | None) -> EngineSample:
    fields: dict[str, float | None] = {
        "waiting": 0.0,
        "running": 0.0,
        "kv_cache_usage": 0.0,
        "ttft_sum": 0.0,
        "ttft_count": 0.0,
        "queue_time_sum": 0.0,
        "queue_time_count": 0.0,
        "success_total": 0.0,
        **values,
    }
    return EngineSample(NS, pod, "node-a", **fields)  # type: ignore[arg-type]


def points(*pairs: tuple[float, float]) -> list[tuple[int, float]]:
    return [(round(t * 1000), v) for t, v in pairs]


def test_rate_reads_the_closed_range_of_2_42() -> None:
    # [0 s, 60 s] holds the sample at 0 s: increase 60 over the 60 s sampled, no gap at either end: 1/s. A left-open
    # range (Prometheus 3) would drop it: 60 over the 45 s from 15 s, extrapolated by 15 s to the start: 1.33/s
    pairs = points((0, 100), (15, 100), (30, 130), (45, 145), (60, 160))
    assert extrapolated_rate(pairs, 0, 60_000, 60) == pytest.approx(1.0)


def test_rate_extrapolates_to_an_end_closer_than_1_1_intervals_and_by_half_an_interval_otherwise() -> None:
    # samples 15 s apart (threshold 16.5 s): 10 s to the start is extrapolated, the 20 s to the end only by 7.5 s,
    # so the 60 increase over 30 s sampled counts over 47.5 s: 60 x 47.5 / 30 / 60
    pairs = points((10, 200), (25, 230), (40, 260))
    assert extrapolated_rate(pairs, 0, 60_000, 60) == pytest.approx(47.5 / 30)


def test_rate_extrapolates_no_further_back_than_the_counters_zero() -> None:
    # 5 → 35 over 30 s reaches 0 five seconds before the first sample: the range counts 30 + 5 s, not 30 + 7.5 s
    pairs = points((30, 5), (45, 20), (60, 35))
    assert extrapolated_rate(pairs, 0, 60_000, 60) == pytest.approx(30 * (35 / 30) / 60)


def test_rate_counts_a_drop_as_a_reset_to_zero() -> None:
    # 10, 20, then 5: a restart; the increase is (25 - 10) + 20 = 35 over the whole minute
    pairs = points((0, 10), (15, 20), (30, 5), (45, 15), (60, 25))
    assert extrapolated_rate(pairs, 0, 60_000, 60) == pytest.approx(35 / 60)


def test_rate_needs_two_samples() -> None:
    assert extrapolated_rate(points((30, 5)), 0, 60_000, 60) is None


def test_an_instant_query_looks_back_five_minutes_inclusive() -> None:
    pipeline = MetricPipeline()
    pipeline.scrape(Scrape(0.0, engines=[engine("e-0", waiting=3)]))
    assert pipeline.pods("inference_requests_waiting", 300.0) == {(NS, "e-0"): 3}
    assert pipeline.pods("inference_requests_waiting", 300.001) == {}


def test_a_pod_no_longer_scraped_leaves_instant_queries_at_the_next_scrape() -> None:
    pipeline = MetricPipeline()
    for at in (0.0, 15.0):
        pipeline.scrape(Scrape(at, engines=[engine("e-0", waiting=1), engine("e-1", waiting=2)]))
    pipeline.scrape(Scrape(30.0, engines=[engine("e-0", waiting=1)]))
    assert pipeline.pods("inference_requests_waiting", 29.999) == {(NS, "e-0"): 1, (NS, "e-1"): 2}
    assert pipeline.pods("inference_requests_waiting", 30.0) == {(NS, "e-0"): 1}
    assert pipeline.external("inference_requests_waiting", NS, 30.0) == 1


def test_a_gone_pods_counters_still_have_a_rate_while_the_window_holds_two_samples() -> None:
    # rate() skips the staleness marker and reads the samples before it: e-1's mean TTFT stays (0.5 s) until its
    # sample at 15 s leaves the window; the adapter answers it only for pods the HPA's selector still lists
    pipeline = MetricPipeline()
    pipeline.scrape(Scrape(0.0, engines=[engine("e-1", ttft_sum=1.0, ttft_count=2)]))
    pipeline.scrape(Scrape(15.0, engines=[engine("e-1", ttft_sum=3.0, ttft_count=6)]))
    pipeline.scrape(Scrape(30.0))
    assert pipeline.pods("inference_time_to_first_token_seconds", 40.0) == {(NS, "e-1"): pytest.approx(0.5)}
    assert pipeline.pods("inference_requests_waiting", 40.0) == {}
    assert pipeline.pods("inference_time_to_first_token_seconds", 60.001) == {}


def test_values_an_engine_cannot_mean_are_dropped_never_corrected() -> None:
    pipeline = MetricPipeline()
    pipeline.scrape(
        Scrape(
            0.0,
            engines=[
                engine("e-0", waiting=math.inf, running=-1, kv_cache_usage=1.7),
                engine("e-1", waiting=4, running=2, kv_cache_usage=0.25),
                engine("e-2", waiting=1, running=3, kv_cache_usage=0.75),
            ],
            gpus=[GpuSample(NS, "e-0", "node-a", math.nan), GpuSample(NS, "e-1", "node-a", 93.0)],
        )
    )
    assert pipeline.pods("inference_requests_waiting", 0.0) == {(NS, "e-1"): 4, (NS, "e-2"): 1}
    assert pipeline.pods("inference_requests_running", 0.0) == {(NS, "e-1"): 2, (NS, "e-2"): 3}
    assert pipeline.pods("inference_kv_cache_usage", 0.0) == {(NS, "e-1"): 25, (NS, "e-2"): 75}
    assert pipeline.pods("gpu_utilization", 0.0) == {(NS, "e-1"): 93}
    assert pipeline.external("inference_requests_running", NS, 0.0) == 5
    assert pipeline.external("inference_kv_cache_usage", NS, 0.0) == 50  # (0.25 + 0.75) / 2 x 100
    assert pipeline.external("inference_requests_waiting", "other", 0.0) is None


def test_demand_adds_the_gateways_queue_to_the_engines() -> None:
    pipeline = MetricPipeline()
    engines = [engine("e-0", waiting=3), engine("e-1", waiting=2)]
    pipeline.scrape(Scrape(0.0, engines=engines, gateways=[GatewaySample(NS, "epp-0", 4, 0)]))
    assert pipeline.external("inference_demand", NS, 0.0) == 9
    pipeline.scrape(Scrape(15.0, gateways=[GatewaySample(NS, "epp-0", 6, 0)]))
    assert pipeline.external("inference_demand", NS, 15.0) == 6  # no replica: the gateway's queue alone
    pipeline.scrape(Scrape(30.0, engines=engines))
    assert pipeline.external("inference_demand", NS, 30.0) == 5
    pipeline.scrape(Scrape(45.0))
    assert pipeline.external("inference_demand", NS, 45.0) is None


def test_request_rate_is_the_gateways_then_the_engines_arrivals_then_their_finished_requests() -> None:
    pipeline = MetricPipeline()
    pipeline.scrape(Scrape(0.0, engines=[engine("e-0", success_total=0)]))
    pipeline.scrape(Scrape(15.0, engines=[engine("e-0", success_total=30)]))
    # 30 in 15 s sampled, 0 s to the end, the zero 0 s before the first: 30 x 15 / 15 / 60
    assert pipeline.external("inference_request_rate", NS, 15.0) == pytest.approx(0.5)
    pipeline.scrape(Scrape(30.0, engines=[engine("e-0", success_total=60, incoming_total=100)]))
    pipeline.scrape(Scrape(45.0, engines=[engine("e-0", success_total=90, incoming_total=145)]))
    # the arrivals counter has two samples now: 45 over 15 s, extrapolated 7.5 s back (its zero is 33 s back) and
    # 0 s forward: 45 x 22.5 / 15 / 60
    assert pipeline.external("inference_request_rate", NS, 45.0) == pytest.approx(45 * 22.5 / 15 / 60)
    gateway = GatewaySample(NS, "epp-0", 0, 1000)
    pipeline.scrape(Scrape(60.0, engines=[engine("e-0", success_total=90, incoming_total=145)], gateways=[gateway]))
    # one gateway sample: its rate() is empty, so the arrivals answer (100 to 145 from 30 s to 60 s, zero 66 s back)
    assert pipeline.external("inference_request_rate", NS, 60.0) == pytest.approx(45 * (30 + 7.5) / 30 / 60)
    pipeline.scrape(Scrape(75.0, gateways=[GatewaySample(NS, "epp-0", 0, 1060)]))
    # 60 over 15 s, 7.5 s back, 0 s forward
    assert pipeline.external("inference_request_rate", NS, 75.0) == pytest.approx(60 * 22.5 / 15 / 60)


def test_capacity_demand_scales_the_kv_use_by_what_arrives_over_what_finishes() -> None:
    pipeline = MetricPipeline()
    for at, n in ((0.0, 0), (15.0, 1), (30.0, 2)):
        engines = [engine("e-0", kv_cache_usage=1.0, success_total=10 * n),
                   engine("e-1", kv_cache_usage=0.8, success_total=5 * n)]  # fmt: skip
        pipeline.scrape(Scrape(at, engines=engines, gateways=[GatewaySample(NS, "epp-0", 30, 45 * n)]))
    # mean KV 90 %; in the window, 90 arrived and 30 finished over the 30 s sampled, each counter from zero at 0 s,
    # so no extrapolation: 90 / 60 = 1.5/s and 0.5/s: 3; the 30 held were counted as they arrived
    assert pipeline.external("inference_capacity_demand", NS, 30.0) == pytest.approx(90 * 3)
    calm = MetricPipeline()
    for at, n in ((0.0, 0), (15.0, 1)):
        calm.scrape(Scrape(at, engines=[engine("e-0", kv_cache_usage=0.5, success_total=10 * n)],
                           gateways=[GatewaySample(NS, "epp-0", 0, 5 * n)]))  # fmt: skip
    assert calm.external("inference_capacity_demand", NS, 15.0) == 50  # fewer arrive than finish: the KV use
    surge = MetricPipeline()
    for at, n in ((0.0, 0), (15.0, 1)):
        surge.scrape(Scrape(at, engines=[engine("e-0", kv_cache_usage=0.4, running=8, success_total=5 * n)],
                            gateways=[GatewaySample(NS, "epp-0", 0, 15 * n)]))  # fmt: skip
    # 3 times as many arrive as finish, but nothing waits or is held: the KV use, which holds what arrived already
    assert surge.external("inference_capacity_demand", NS, 15.0) == 40
    surge.scrape(Scrape(30.0, engines=[engine("e-0", kv_cache_usage=0.4, running=8, waiting=1, success_total=10)],
                        gateways=[GatewaySample(NS, "epp-0", 0, 30)]))  # fmt: skip
    # one waits: the arrivals count, 30 over 10 finished in the 30 s sampled
    assert surge.external("inference_capacity_demand", NS, 30.0) == pytest.approx(40 * 3)
    one = MetricPipeline()
    one.scrape(Scrape(0.0, engines=[engine("e-0", kv_cache_usage=0.25)], gateways=[GatewaySample(NS, "epp-0", 9, 0)]))
    assert one.external("inference_capacity_demand", NS, 0.0) == 25  # no rate yet: the KV use
    one.scrape(Scrape(15.0, gateways=[GatewaySample(NS, "epp-0", 9, 0)]))
    assert one.external("inference_capacity_demand", NS, 15.0) is None  # no engine


def test_capacity_demand_counts_what_waits_beside_what_runs_up_to_as_much_again() -> None:
    pipeline = MetricPipeline()
    engines = [engine("e-0", kv_cache_usage=0.5, running=10, waiting=5),
               engine("e-1", kv_cache_usage=0.5, running=4, waiting=40),
               engine("e-2", kv_cache_usage=0.5, running=0, waiting=3)]  # fmt: skip
    pipeline.scrape(Scrape(0.0, engines=engines))
    # no rate yet; the queue: e-0 (10 + 5) / 10 = 1.5, e-1 (4 + 40) / 4 = 11 counted as 2, e-2 runs nothing and is
    # left out: (1.5 + 2) / 2 = 1.75 x the mean KV use, 50
    assert pipeline.external("inference_capacity_demand", NS, 0.0) == pytest.approx(50 * 1.75)


def test_capacity_demand_counts_a_new_engine_for_the_share_of_the_minute_it_reported() -> None:
    pipeline = MetricPipeline()
    for n, at in enumerate((0.0, 15.0, 30.0, 45.0, 60.0)):
        engines = [engine("e-0", kv_cache_usage=1.0, success_total=15 * n, waiting=1)]
        if at >= 45:
            engines.append(engine("e-1", kv_cache_usage=0.0, success_total=0))
        pipeline.scrape(Scrape(at, engines=engines, gateways=[GatewaySample(NS, "epp-0", 0, 45 * n)]))
    # finished 1/s over the minute by e-0 (5 samples) and e-1 (2 samples): 1 / (7 / 5) a second an engine, and 2
    # engines now finish 1.43/s; 3/s arrive: 3 / 1.43 = 2.1 x the mean KV use, 50
    assert pipeline.external("inference_capacity_demand", NS, 60.0) == pytest.approx(50 * 2.1)


def test_activity_is_1_while_anything_arrives_is_held_waits_or_runs() -> None:
    pipeline = MetricPipeline()
    pipeline.scrape(Scrape(0.0, engines=[engine("e-0")], gateways=[GatewaySample(NS, "epp-0", 0, 7)]))
    assert pipeline.external("inference_activity", NS, 0.0) == 0  # no arrival rate yet, nothing held or running
    pipeline.scrape(Scrape(15.0, engines=[engine("e-0", running=1)], gateways=[GatewaySample(NS, "epp-0", 0, 7)]))
    assert pipeline.external("inference_activity", NS, 15.0) == 1  # mid-generation
    pipeline.scrape(Scrape(30.0, gateways=[GatewaySample(NS, "epp-0", 2, 7)]))
    assert pipeline.external("inference_activity", NS, 30.0) == 1  # held at the gateway, no replica
    pipeline.scrape(Scrape(45.0, gateways=[GatewaySample(NS, "epp-0", 0, 8)]))
    assert pipeline.external("inference_activity", NS, 45.0) == 1  # one arrived in the window
    pipeline.scrape(Scrape(120.0, gateways=[GatewaySample(NS, "epp-0", 0, 8)]))
    pipeline.scrape(Scrape(135.0, gateways=[GatewaySample(NS, "epp-0", 0, 8)]))
    assert pipeline.external("inference_activity", NS, 135.0) == 0
    assert pipeline.external("inference_activity", "other", 135.0) is None


def test_values_are_served_to_the_nano_unit() -> None:
    assert served(0.1 + 0.2) == 0.3  # 0.30000000000000004 would read 301m in the HPA's MilliValue
    assert served(1 / 3) == 0.333333333
    assert served(math.nan) is None
    assert served(-math.inf) is None


def test_scrapes_go_forward() -> None:
    pipeline = MetricPipeline()
    pipeline.scrape(Scrape(15.0))
    with pytest.raises(ValueError, match="not after"):
        pipeline.scrape(Scrape(15.0))


def test_memory_holds_the_lookback_and_one_window() -> None:
    pipeline = MetricPipeline()
    for i in range(240):  # an hour of 15 s scrapes; e-0 serves throughout, e-1 goes after ten minutes
        pods = [engine("e-0")] + ([engine("e-1")] if i < 40 else [])
        pipeline.scrape(Scrape(i * 15.0, engines=pods))
    # (300 + 60) / 15 + 1 scrapes of e-0 are still needed; e-1 is forgotten
    assert pipeline.samples_kept() == 25
