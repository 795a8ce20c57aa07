"""The replica calculator against kubernetes/kubernetes' own cases (pkg/controller/podautoscaler/
replica_calculator_test.go, as of the release with HPAConfigurableTolerance) and the HPA docs page.

The Go tests give values in milli-units (``levels: 20000`` is 20); they are written here in units. Each case
names the Go test it comes from; the expected replicas and usages are the Go test's.
"""

from __future__ import annotations

import pytest

from loadgen.autoscaling.observation import Observation, Phase, Pod
from loadgen.autoscaling.replica_calculator import Tolerances, propose
from loadgen.autoscaling.spec import MetricSpec, SourceType, TargetType

DEFAULT = Tolerances(0.1, 0.1)
UP_1_PERCENT = Tolerances(0.1, 0.01)  # Tolerances{defaultTestingTolerance, .01} in the Go tests


def pods(n: int, readiness: list[bool] | None = None, phases: list[Phase] | None = None) -> tuple[Pod, ...]:
    """The Go tests' fixture: ``n`` pods named like ``test-pod-<i>``, Running and Ready unless told otherwise."""
    return tuple(
        Pod(
            f"test-pod-{i}",
            phase=phases[i] if phases else "Running",
            ready=readiness[i] if readiness else True,
        )
        for i in range(n)
    )


def pods_metric(current: int, levels: list[float], target: float, *, n: int | None = None,
                readiness: list[bool] | None = None, phases: list[Phase] | None = None) -> Observation:  # fmt: skip
    listed = pods(n if n is not None else current, readiness, phases)
    values = {f"test-pod-{i}": v for i, v in enumerate(levels)}
    return Observation(replicas=current, pods=listed, pod_metrics={"qps": values})


def single(source: SourceType, current: int, value: float, readiness: list[bool] | None = None) -> Observation:
    return Observation(
        replicas=current,
        pods=pods(current, readiness),
        object_metrics={"qps": value} if source == "Object" else {},
        external_metrics={"qps": (value,)} if source == "External" else {},
    )


@pytest.mark.parametrize(
    ("go_test", "current", "levels", "target", "readiness", "tolerances", "expected", "usage"),
    [
        ("TestReplicaCalcScaleUpCM", 3, [20, 10, 30], 15, None, DEFAULT, 4, 20),
        # the PodReady condition is looked at for CPU only: an unready pod that reports a value counts
        ("TestReplicaCalcScaleUpCMUnreadyHotCpuNoLessScale", 3, [50, 10, 30], 15, [True, True, False], DEFAULT, 6, 30),
        ("TestReplicaCalcScaleUpCMUnreadyHotCpuScaleWouldScaleDown", 3, [50, 15, 30], 15, [False, True, False],
         DEFAULT, 7, 31.666),
        ("TestReplicaCalcScaleDownCM", 5, [12] * 5, 20, None, DEFAULT, 3, 12),
        ("TestReplicaCalcToleranceCM", 3, [20, 21, 21], 20, None, DEFAULT, 3, 20.666),
        ("TestReplicaCalcConfigurableToleranceCM", 3, [20, 21, 21], 20, None, UP_1_PERCENT, 4, 20.666),
        # two of five pods without a value, the average exactly on target: no change
        ("TestPlainMetricReplicaCalcMissingMetricsNoChangeEq", 5, [20, 19, 21], 20, None, DEFAULT, 5, 20),
    ],
)  # fmt: skip
def test_pods_metric_against_kubernetes_tests(
    go_test: str,
    current: int,
    levels: list[float],
    target: float,
    readiness: list[bool] | None,
    tolerances: Tolerances,
    expected: int,
    usage: float,
) -> None:
    spec = MetricSpec("qps", "Pods", target)
    proposal = propose(spec, pods_metric(current, levels, target, readiness=readiness), tolerances)
    assert (proposal.replicas, proposal.usage) == (expected, usage), go_test


def test_a_surge_pod_without_a_value_counts_as_the_target_and_cannot_turn_a_scale_down_into_a_scale_up() -> None:
    # TestReplicaCalcDuringRollingUpdateWithMaxSurgeCM: 2 replicas, 3 Running pods, values for 2 of them
    spec = MetricSpec("qps", "Pods", 17)
    proposal = propose(spec, pods_metric(2, [10, 10], 17, n=3), DEFAULT)
    assert (proposal.replicas, proposal.usage) == (2, 10)


@pytest.mark.parametrize(
    ("go_test", "source", "target_type", "current", "value", "target", "readiness", "tolerances", "expected", "usage"),
    [
        ("TestReplicaCalcScaleUpCMObject", "Object", "Value", 3, 20, 15, None, DEFAULT, 4, 20),
        # a Value target multiplies by the ready pods only: 1 of 3 here, so 5 rather than 15
        ("TestReplicaCalcScaleUpCMObjectIgnoresUnreadyPods", "Object", "Value", 3, 50, 10, [False, True, False],
         DEFAULT, 5, 50),
        ("TestReplicaCalcScaleDownCMObject", "Object", "Value", 5, 12, 20, None, DEFAULT, 3, 12),
        ("TestReplicaCalcToleranceCMObject", "Object", "Value", 3, 20.666, 20, None, DEFAULT, 3, 20.666),
        ("TestReplicaCalcConfigurableToleranceCMObject", "Object", "Value", 3, 20.666, 20, None, UP_1_PERCENT, 4,
         20.666),
        ("TestReplicaCalcScaleUpCMPerPodObject", "Object", "AverageValue", 3, 20, 5, None, DEFAULT, 4, 6.667),
        ("TestReplicaCalcScaleDownPerPodCMObject", "Object", "AverageValue", 5, 6, 2, None, DEFAULT, 3, 1.2),
        ("TestReplicaCalcTolerancePerPodCMObject", "Object", "AverageValue", 4, 20.166, 5, None, DEFAULT, 4, 5.042),
        ("TestReplicaCalcConfigurableTolerancePerPodCMObject", "Object", "AverageValue", 4, 20.208, 5, None,
         UP_1_PERCENT, 5, 5.052),
        ("TestReplicaCalcScaleUpCMExternalIgnoresUnreadyPods", "External", "Value", 3, 8.6, 4.4, [False, True, False],
         DEFAULT, 2, 8.6),
        ("TestReplicaCalcScaleDownCMExternal", "External", "Value", 5, 8.6, 14.334, None, DEFAULT, 3, 8.6),
        ("TestReplicaCalcToleranceCMExternal", "External", "Value", 3, 8.6, 8.888, None, DEFAULT, 3, 8.6),
        ("TestReplicaCalcConfigurableToleranceCMExternal", "External", "Value", 3, 8.9, 8.8, None, UP_1_PERCENT, 4,
         8.9),
        ("TestReplicaCalcScaleUpPerPodCMExternal", "External", "AverageValue", 3, 8.6, 2.15, None, DEFAULT, 4, 2.867),
        ("TestReplicaCalcScaleDownPerPodCMExternal", "External", "AverageValue", 5, 8.6, 2.867, None, DEFAULT, 3,
         1.72),
        ("TestReplicaCalcTolerancePerPodCMExternal", "External", "AverageValue", 3, 8.6, 2.9, None, DEFAULT, 3,
         2.867),
        ("TestReplicaCalcConfigurableTolerancePerPodCMExternal", "External", "AverageValue", 3, 8.6, 2.8, None,
         UP_1_PERCENT, 4, 2.867),
    ],
)  # fmt: skip
def test_object_and_external_metrics_against_kubernetes_tests(
    go_test: str,
    source: SourceType,
    target_type: TargetType,
    current: int,
    value: float,
    target: float,
    readiness: list[bool] | None,
    tolerances: Tolerances,
    expected: int,
    usage: float,
) -> None:
    spec = MetricSpec("qps", source, target, target_type)
    proposal = propose(spec, single(source, current, value, readiness), tolerances)
    assert (proposal.replicas, proposal.usage) == (expected, usage), go_test


@pytest.mark.parametrize(("value", "expected"), [(0.2, 8), (0.05, 2), (0.105, 4), (0.095, 4)])
def test_the_docs_example_doubles_at_200m_halves_at_50m_and_holds_within_the_tolerance(
    value: float, expected: int
) -> None:
    # kubernetes.io, "Horizontal Pod Autoscaling", algorithm details: 200m against 100m doubles the replicas,
    # 50m halves them, and a ratio within 0.1 of 1.0 changes nothing (4 replicas here)
    spec = MetricSpec("qps", "Pods", 0.1)
    observation = pods_metric(4, [value] * 4, 0.1)
    assert propose(spec, observation, DEFAULT).replicas == expected


def test_a_pending_pod_counts_as_zero_on_a_way_up() -> None:
    # calcPlainMetricReplicas: two Running pods at 16 against 10 would ask ceil(1.6 x 2) = 4; the Pending third
    # counts as 0 on a way up, the ratio over three is 32 / 3 / 10 = 1.067, within the tolerance: no change
    spec = MetricSpec("qps", "Pods", 10)
    observation = pods_metric(3, [0, 16, 16], 10, phases=["Pending", "Running", "Running"])
    assert propose(spec, observation, DEFAULT).replicas == 3


def test_a_loading_pod_without_a_value_counts_as_the_target_on_a_way_down() -> None:
    # calcPlainMetricReplicas: three pods at 5 against 10 would ask ceil(0.5 x 3) = 2; the fourth, Running but
    # not Ready and without a value, is missing and counts as 10 on a way down: 25 / 4 / 10 = 0.625, ceil(2.5) = 3
    spec = MetricSpec("qps", "Pods", 10)
    observation = pods_metric(4, [5, 5, 5], 10, readiness=[True, True, True, False])
    assert propose(spec, observation, DEFAULT).replicas == 3


def test_no_pods_or_no_values_is_an_error_not_a_proposal() -> None:
    spec = MetricSpec("qps", "Pods", 10)
    assert propose(spec, Observation(2, (), {"qps": {}}), DEFAULT).replicas is None
    assert propose(spec, Observation(2, pods(2), {"qps": {}}), DEFAULT).replicas is None
    external = MetricSpec("queue", "External", 5)
    assert propose(external, Observation(2, pods(2)), DEFAULT).replicas is None


@pytest.mark.parametrize(
    ("target_type", "value", "expected"),
    [("Value", 0, 0), ("Value", 7, 2), ("AverageValue", 0, 0), ("AverageValue", 7, 2)],
)
def test_at_zero_replicas_object_and_external_metrics_ask_for_ceil_value_over_target(
    target_type: TargetType, value: float, expected: int
) -> None:
    # getUsageRatioReplicaCount at currentReplicas 0 (HPAScaleToZero) and Get*PerPodMetricReplicas at 0 status
    # replicas: ceil(value / target), no tolerance
    for source in ("Object", "External"):
        spec = MetricSpec("queue", source, 5, target_type)
        observation = Observation(0, (), {"queue": {}}, {"queue": value}, {"queue": (value,)})
        assert propose(spec, observation, DEFAULT).replicas == expected


@pytest.mark.parametrize(("value", "expected"), [(0.11, 10), (0.111, 12), (0.09, 10), (0.089, 9)])
def test_the_tolerance_band_includes_its_edges(value: float, expected: int) -> None:
    # Tolerances.isWithin: (1 - down) <= ratio <= (1 + up), both ends included; 10 pods against 0.1 each:
    # 0.11 is exactly 1.1, no change; 0.111 is 1.11, ceil(11.1) = 12; 0.09 is exactly 0.9; 0.089, ceil(8.9) = 9
    spec = MetricSpec("qps", "Pods", 0.1)
    assert propose(spec, pods_metric(10, [value] * 10, 0.1), DEFAULT).replicas == expected
