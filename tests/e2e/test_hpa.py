"""The demo's HPA (demo/hpa.py) against cases computed by hand from the Kubernetes documentation."""

import pytest

from demo.hpa import Autoscaler, HpaSpec, propose, propose_external


def pods(n: int) -> list[str]:
    return [f"p{i}" for i in range(n)]


def replicas(current: int, values: list[float], target: float = 70) -> int | None:
    """What the replica calculator proposes when every pod has a value."""
    names = pods(len(values)) or pods(current)
    return propose(current, names, dict(zip(names, values, strict=False)), HpaSpec(target)).replicas


@pytest.mark.parametrize(
    ("current", "values", "desired"),
    [
        (3, [95, 95, 95], 5),  # ceil(3 x 95/70) = ceil(4.07)
        (3, [75, 70, 72], 3),  # within the 10 % tolerance
        (3, [63, 63, 63], 3),  # 0.9 exactly: still within
        (4, [20, 20, 20, 20], 2),  # ceil(4 x 20/70) = ceil(1.14)
        (2, [0, 0], 0),  # the calculator alone: minReplicas is the controller's bound (below)
        (8, [100] * 8, 12),  # ceil(8 x 100/70) = ceil(11.4); maxReplicas is the controller's bound
    ],
)
def test_the_hpa_formula(current: int, values: list[float], desired: int) -> None:
    assert replicas(current, values) == desired


# Worked examples of the Kubernetes documentation ("Horizontal Pod Autoscaling", algorithm details, and the
# HorizontalPodAutoscaler walkthrough), independent of the cases above.
@pytest.mark.parametrize(
    ("current", "value", "target", "desired"),
    [
        (4, 0.200, 0.100, 8),  # "200m ... desired value is 100m, the number of replicas will be doubled"
        (4, 0.050, 0.100, 2),  # "50m, you'll halve the number of replicas"
        (4, 0.105, 0.100, 4),  # "sufficiently close to 1.0 (within ... 0.1 by default)": no change
        (1, 305.0, 50.0, 7),  # the walkthrough: php-apache at 305% of a 50% CPU target goes from 1 to 7 replicas
    ],
)
def test_the_formula_against_the_kubernetes_documentation(
    current: int, value: float, target: float, desired: int
) -> None:
    assert replicas(current, [value] * current, target=target) == desired


# "If there were any missing metrics, the control plane recomputes the average more conservatively, assuming those
# pods were consuming 100% of the desired value in case of a scale down, and 0% in case of a scale up. [...] If the
# new ratio reverses the scale direction, or is within the tolerance, the control plane doesn't take any scaling
# action." The replicas are then ceil(new ratio x every pod counted).
@pytest.mark.parametrize(
    ("current", "values", "desired", "why"),
    [
        # 95/70 = 1.36 up; with p2 at 0: 190/3 = 63.3, ratio 0.90: within the tolerance
        (3, {"p0": 95, "p1": 95}, 3, "1 without a value counted as 0: ratio 0.90, within the tolerance of 1"),
        # 140/70 = 2 up; with p2 at 0: 280/3 = 93.3, ratio 1.33: ceil(1.33 x 3) = 4
        (3, {"p0": 140, "p1": 140}, 4, "1 without a value counted as 0: ratio 1.33, ceil(1.33 x 3) = 4"),
        # 100/70 = 1.43 up; with p1 and p2 at 0: 100/3 = 33.3, ratio 0.48: the other way, no change
        (3, {"p0": 100}, 3, "2 without a value counted as 0: ratio 0.48, the other way"),
        # 7/70 = 0.1 down; with p2 at the target 70: 84/3 = 28, ratio 0.4: ceil(0.4 x 3) = 2
        (3, {"p0": 7, "p1": 7}, 2, "1 without a value counted as 70: ratio 0.40, ceil(0.40 x 3) = 2"),
        # 56/70 = 0.8 down; with p2 at 70: 182/3 = 60.7, ratio 0.87: ceil(0.87 x 3) = 3
        (3, {"p0": 56, "p1": 56}, 3, "1 without a value counted as 70: ratio 0.87, ceil(0.87 x 3) = 3"),
        # the same while the Deployment is already at 2 (p2 still listed): 3 would be a scale-up, no change
        (2, {"p0": 56, "p1": 56}, 2, "1 without a value counted as 70: ratio 0.87, ceil(0.87 x 3) the other way"),
    ],
)
def test_missing_pods_as_the_hpa_controller_counts_them(
    current: int, values: dict[str, float], desired: int, why: str
) -> None:
    proposal = propose(current, pods(3), values, HpaSpec(70))
    assert (proposal.replicas, proposal.why) == (desired, why)
    assert proposal.missing == tuple(p for p in pods(3) if p not in values)


def test_no_pods_or_no_values_is_no_recommendation() -> None:
    assert propose(3, [], {}, HpaSpec(70)).replicas is None
    empty = propose(3, pods(3), {}, HpaSpec(70))
    assert (empty.replicas, empty.why) == (None, "no values for the pods (FailedGetPodsMetric)")
    scaler = Autoscaler(HpaSpec(70, scale_down_window=60))
    assert scaler.decide(0, 3, pods(3), {}).replicas == 3
    # a failed sync records nothing: a scale-down right after is not held by it
    assert scaler.decide(1, 3, pods(3), dict.fromkeys(pods(3), 7.0)).replicas == 1


def test_a_scale_down_waits_for_the_highest_recommendation_of_its_window() -> None:
    # "the algorithm looks into previously computed desired states, and uses the highest value from the specified
    # interval": recommendations 5 at 0 s, 3 at 60 s, 2 at 120 s with a 300 s window, from 5 replicas
    scaler = Autoscaler(HpaSpec(70, max_replicas=10, scale_down_window=300))
    every = pods(5)
    at_target = dict.fromkeys(every, 70.0)
    assert scaler.decide(0, 5, every, at_target).replicas == 5
    assert scaler.decide(60, 5, every, dict.fromkeys(every, 40.0)).proposal.replicas == 3  # ceil(5 x 0.571)
    held = scaler.decide(120, 5, every, dict.fromkeys(every, 28.0))  # ceil(5 x 0.4) = 2
    assert (held.proposal.replicas, held.replicas) == (2, 5)
    assert held.why == "held to 5: highest recommendation of the last 300 s"
    # at 301 s the 5 of 0 s has left the window: the highest left is 3 (60 s)
    assert scaler.decide(301, 5, every, dict.fromkeys(every, 28.0)).replicas == 3
    # at 361 s the 3 has left too: 2
    assert scaler.decide(361, 3, pods(3), dict.fromkeys(pods(3), 28.0 * 5 / 3)).replicas == 2


def test_a_scale_up_waits_for_the_lowest_recommendation_of_its_window() -> None:
    scaler = Autoscaler(HpaSpec(70, scale_up_window=30, scale_down_window=0))
    two = pods(2)
    assert scaler.decide(0, 2, two, dict.fromkeys(two, 70.0)).replicas == 2
    held = scaler.decide(10, 2, two, dict.fromkeys(two, 140.0))  # ceil(2 x 2) = 4, but 2 was wanted at 0 s
    assert (held.proposal.replicas, held.replicas) == (4, 2)
    assert held.why == "held to 2: lowest recommendation of the last 30 s"
    assert scaler.decide(31, 2, two, dict.fromkeys(two, 140.0)).replicas == 4


def test_without_windows_every_recommendation_applies_at_once() -> None:
    scaler = Autoscaler(HpaSpec(70, scale_up_window=0, scale_down_window=0))
    assert scaler.decide(0, 1, pods(1), {"p0": 100}).replicas == 2  # 1.43: a saturated GPU shows at most 100
    assert scaler.decide(1, 4, pods(4), dict.fromkeys(pods(4), 10.0)).replicas == 1


def test_min_and_max_replicas_bound_the_result() -> None:
    scaler = Autoscaler(HpaSpec(70, min_replicas=2, max_replicas=5, scale_down_window=0))
    up = scaler.decide(0, 4, pods(4), dict.fromkeys(pods(4), 100.0))  # ceil(4 x 1.43) = 6
    assert (up.proposal.replicas, up.replicas, up.why) == (6, 5, "bounded by maxReplicas 5")
    down = scaler.decide(1, 3, pods(3), dict.fromkeys(pods(3), 0.0))
    assert (down.proposal.replicas, down.replicas, down.why) == (0, 2, "bounded by minReplicas 2")
    # a Deployment already outside the bounds is brought inside whatever the metric says
    assert scaler.decide(2, 7, pods(7), dict.fromkeys(pods(7), 70.0)).replicas == 5
    assert scaler.decide(3, 1, pods(1), {"p0": 70.0}).replicas == 2


def test_a_decision_scales_only_when_the_replicas_change() -> None:
    scaler = Autoscaler(HpaSpec(70))
    assert not scaler.decide(0, 3, pods(3), dict.fromkeys(pods(3), 72.0)).scales
    assert scaler.decide(1, 3, pods(3), dict.fromkeys(pods(3), 95.0)).scales


# External metrics (replica_calculator.go's GetExternalMetricReplicas and GetExternalPerPodMetricReplicas): the items
# are summed; from zero replicas (HPAScaleToZero) both target types give ceil(sum / target).
@pytest.mark.parametrize(
    ("current", "ready", "values", "target", "per_pod", "desired"),
    [
        (0, 0, [12.0], 5.0, True, 3),  # 12 requests waiting, 5 per replica: ceil(12/5) wakes 3 from zero
        (0, 0, [3.0, 4.0], 5.0, True, 2),  # the items summed: ceil(7/5)
        (0, 0, [0.0], 5.0, True, 0),  # nothing waiting keeps it at zero
        (0, 0, [1.0], 5.0, False, 1),  # a Value target from zero: ceil(1/5)
        (2, 2, [30.0], 5.0, True, 6),  # AverageValue: ratio 30/(5x2) = 3, ceil(30/5)
        (2, 2, [10.5], 5.0, True, 2),  # ratio 1.05: within the tolerance
        (4, 4, [0.0], 5.0, True, 0),  # demand gone: the calculator says zero; minReplicas bounds it (below)
        (3, 2, [20.0], 10.0, False, 4),  # Value: ceil(2.0 x 2 ready)
    ],
)
def test_the_external_metric_formula_from_and_to_zero(
    current: int, ready: int, values: list[float], target: float, per_pod: bool, desired: int
) -> None:
    assert propose_external(current, ready, values, HpaSpec(target), per_pod).replicas == desired


def test_no_external_value_is_no_recommendation() -> None:
    proposal = propose_external(0, 0, [], HpaSpec(5.0), per_pod=True)
    assert proposal.replicas is None
    assert "FailedGetExternalMetric" in proposal.why


def test_scale_to_zero_and_back_with_min_replicas_zero() -> None:
    hpa = Autoscaler(HpaSpec(5.0, min_replicas=0, max_replicas=8, scale_down_window=0))

    def sync(at: float, current: int, demand: float) -> int:
        return hpa.settle(at, current, propose_external(current, current, [demand], hpa.spec, per_pod=True)).replicas

    assert sync(0, 0, 0.0) == 0
    assert sync(15, 0, 12.0) == 3
    assert sync(30, 3, 40.0) == 8  # ceil(40/5), bounded by maxReplicas
    assert sync(45, 8, 0.0) == 0
    assert (
        Autoscaler(HpaSpec(5.0, min_replicas=1))
        .settle(0, 1, propose_external(1, 1, [0.0], HpaSpec(5.0), True))
        .replicas
        == 1
    )
