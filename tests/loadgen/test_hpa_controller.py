"""A whole sync (reconcileAutoscaler in kubernetes' horizontal.go) and the replica series over a metric series.

Where a number is not one of kubernetes' own, the comment computes it by hand from the rule it tests.
"""

from __future__ import annotations

from loadgen.autoscaling import (
    Behavior,
    ControllerConfig,
    HpaController,
    HpaSpec,
    MetricSpec,
    Observation,
    Sample,
    ScalingRules,
    hpa_decisions,
    replica_series,
    simple_observation,
)

QUEUE = MetricSpec("queue", "External", 10, "AverageValue")


def test_at_zero_replicas_scaling_is_disabled_unless_min_replicas_is_zero() -> None:
    # reconcileAutoscaler: spec.replicas 0 and minReplicas != 0: "Autoscaling is disabled for this resource"
    decision = HpaController(HpaSpec((QUEUE,), max_replicas=10)).sync(0, simple_observation(0, {"queue": 100}))
    assert (decision.replicas, decision.limit) == (0, "ScalingDisabled")
    # minReplicas 0 (HPAScaleToZero): the metric is read at 0 replicas and asks ceil(100 / 10) = 10; without a
    # behavior one sync goes at most to max(2 x 0, 4) = 4
    scale_to_zero = HpaController(HpaSpec((QUEUE,), max_replicas=20, min_replicas=0))
    woken = scale_to_zero.sync(0, simple_observation(0, {"queue": 100}))
    assert (woken.recommendation, woken.replicas, woken.limit) == (10, 4, "ScaleUpLimit")


def test_min_replicas_zero_reaches_zero_once_the_window_allows() -> None:
    # External Value target 5: the value 0 at 2 replicas asks ceil(0 x 2) = 0; with a scale-down window of 0 and
    # the default policy (100 % per 15 s) the HPA goes to 0 at once
    spec = HpaSpec(
        (MetricSpec("queue", "External", 5, "Value"),),
        max_replicas=10,
        min_replicas=0,
        behavior=Behavior(scale_down=ScalingRules(stabilization_window_seconds=0)),
    )
    assert HpaController(spec).sync(0, simple_observation(2, {"queue": 0})).replicas == 0


def test_replicas_outside_the_bounds_go_to_the_bound_without_reading_metrics() -> None:
    spec = HpaSpec((QUEUE,), max_replicas=5, min_replicas=2)
    above = HpaController(spec).sync(0, Observation(replicas=8))
    below = HpaController(spec).sync(0, Observation(replicas=1))
    assert (above.replicas, above.proposals, below.replicas, below.proposals) == (5, (), 2, ())


def test_several_metrics_take_the_highest_and_an_invalid_one_only_blocks_a_scale_down() -> None:
    # computeReplicasForMetrics: the highest valid proposal wins; if a metric is invalid, a scale-up still
    # happens (TestScaleUpOneMetricEmpty) but a scale-down does not (TestNoScaleDownOneMetricEmpty)
    load = MetricSpec("load", "Object", 10, "Value")
    missing = MetricSpec("absent", "External", 1, "AverageValue")
    spec = HpaSpec((missing, load, QUEUE), max_replicas=20, behavior=Behavior())
    # 3 ready replicas: load 30 / 10 asks ceil(3 x 3) = 9, queue 40 / (10 x 3) asks ceil(40 / 10) = 4; the
    # default policies allow max(3 + 4, 2 x 3) = 7
    up = HpaController(spec).sync(0, simple_observation(3, {"load": 30, "queue": 40}))
    assert (up.recommendation, up.metric, up.replicas, up.limit) == (9, "load", 7, "ScaleUpLimit")
    # 4 replicas: load 5 / 10 asks ceil(0.5 x 4) = 2, queue 20 asks 2: a scale-down, blocked by the invalid metric
    down = HpaController(spec).sync(0, simple_observation(4, {"load": 5, "queue": 20}))
    assert (down.replicas, down.limit) == (4, "FailedGetMetrics")


def test_per_hpa_tolerance_against_test_hpa_with_tolerance() -> None:
    # test/integration/hpa TestHPAWithTolerance: 35 replicas, an External metric at 3500, tolerances 5 % up and
    # 50 % down: 3700 scales to 37, 3800 does not, 1000 scales to 10, 800 does not (an AverageValue target of
    # 100, as those numbers imply; no scale-down window, so each sync shows the step at once)
    behavior = Behavior(
        scale_up=ScalingRules(tolerance=0.05), scale_down=ScalingRules(stabilization_window_seconds=0, tolerance=0.5)
    )
    spec = HpaSpec((MetricSpec("m", "External", 100, "AverageValue"),), max_replicas=100, behavior=behavior)
    samples = [Sample(0, {"m": 3700}), Sample(15, {"m": 3800}), Sample(30, {"m": 1000}), Sample(45, {"m": 800})]
    assert replica_series(spec, samples, replicas=35) == [(0, 37), (15, 37), (30, 10), (45, 10)]
    # with HPAConfigurableTolerance off the behavior's tolerances are dropped: 800 / (100 x 10) = 0.8 is outside
    # the controller's 0.1, ceil(800 / 100) = 8
    off = ControllerConfig(configurable_tolerance=False)
    assert replica_series(spec, samples, replicas=35, config=off)[-1] == (45, 8)


def test_without_behavior_a_sync_at_most_doubles_or_reaches_four() -> None:
    # convertDesiredReplicasWithRules: at most max(2 x current, 4) per sync ("scaleUpLimit is the limit because
    # scaleUpLimit < maxReplicas": from 3, calculateScaleUpLimit(3) = 6); an Object metric asking 1000
    spec = HpaSpec((MetricSpec("load", "Object", 1, "Value"),), max_replicas=2000)
    samples = [Sample(0, {"load": 1000}), Sample(45, {"load": 1000})]
    assert [r for _, r in replica_series(spec, samples, replicas=3)] == [6, 12, 24, 48]


def test_the_downscale_window_holds_the_highest_recommendation_for_300_seconds() -> None:
    # A queue of 40 against 10 per replica asks 4; at 60 s it falls to 10, asking 1. Without a behavior the
    # controller keeps recommendations not older than 300 s: the last 4, at 45 s, counts until 345 s included, so
    # 1 comes at 360 s. With a behavior the window excludes a recommendation exactly 300 s old: 1 comes at 345 s.
    samples = [Sample(0, {"queue": 40}), Sample(60, {"queue": 10}), Sample(400, {"queue": 10})]
    legacy = dict(replica_series(HpaSpec((QUEUE,), max_replicas=10), samples, replicas=1))
    assert (legacy[0], legacy[45], legacy[60], legacy[345], legacy[360]) == (4, 4, 4, 4, 1)
    with_behavior = dict(replica_series(HpaSpec((QUEUE,), max_replicas=10, behavior=Behavior()), samples, replicas=1))
    assert (with_behavior[330], with_behavior[345]) == (4, 1)


def test_a_decision_names_the_metric_and_the_rule() -> None:
    samples = [Sample(0, {"queue": 40}), Sample(60, {"queue": 10})]
    decisions = hpa_decisions(HpaSpec((QUEUE,), max_replicas=10), samples, replicas=1)
    assert (decisions[0].metric, decisions[0].replicas, decisions[-1].limit) == ("queue", 4, "ScaleDownStabilized")


def test_pods_metrics_read_what_each_ready_pod_exports() -> None:
    # a Pods metric at 20 per pod against 10 on 2 ready pods and 1 loading (Running, not Ready, no value): the
    # loading pod is missing, counted as 0 on a way up: 40 / 3 / 10 = 1.333, ceil(1.333 x 3) = 4
    spec = HpaSpec((MetricSpec("waiting", "Pods", 10),), max_replicas=10, behavior=Behavior())
    assert replica_series(spec, [Sample(0, {"waiting": 20}, ready=2)], replicas=3) == [(0, 4)]
