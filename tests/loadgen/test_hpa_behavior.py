"""Stabilization, policies and scale events against kubernetes/kubernetes' pkg/controller/podautoscaler/
horizontal_test.go (TestScalingWithRules, TestCalculateScale{Up,Down}Limit..., TestNormalizeDesiredReplicas,
TestNormalizeDesiredReplicasWithBehavior, TestStoreScaleEvents) and the behavior examples of the HPA docs page.

The Go tests place events and recommendations at ``time.Now()`` minus an offset; here ``NOW`` minus the same offset.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from loadgen.autoscaling.behavior import (
    Bounds,
    Recommendation,
    ScaleEvent,
    convert_with_behavior,
    replicas_changed,
    scale_down_limit,
    scale_up_limit,
    stabilize,
    stabilize_legacy,
    store_event,
)
from loadgen.autoscaling.spec import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    FilledRules,
    ScalingPolicy,
    ScalingRules,
    fill_rules,
)

NOW = 10_000.0


def rules(pods: int, pods_period: int, percent: int, percent_period: int, window: int) -> ScalingRules:
    """horizontal_test.go's generateScalingRules: a policy for each non-zero value, selectPolicy Max."""
    policies = []
    if pods:
        policies.append(ScalingPolicy("Pods", pods, pods_period))
    if percent:
        policies.append(ScalingPolicy("Percent", percent, percent_period))
    return ScalingRules(window, "Max", tuple(policies))


def up(given: ScalingRules | None) -> FilledRules:
    return fill_rules(given, DEFAULT_SCALE_UP, 300)


def down(given: ScalingRules | None) -> FilledRules:
    return fill_rules(given, DEFAULT_SCALE_DOWN, 300)


def spread(changes: list[int], period: float) -> list[ScaleEvent]:
    """generateEventsUniformDistribution: one event in the middle of each equal segment of the last ``period``."""
    segment = period / len(changes)
    return [ScaleEvent(c, NOW - (period - segment * (i + 1) + segment / 2)) for i, c in enumerate(changes)]


class Case(NamedTuple):
    name: str  # as in TestScalingWithRules
    up_events: list[ScaleEvent]
    down_events: list[ScaleEvent]
    min_replicas: int
    max_replicas: int
    up_rules: ScalingRules | None
    down_rules: ScalingRules | None
    current: int
    desired: int
    expected: int
    condition: str


CASES = [
    Case("prenormalized desired replicas within range", [], [], 3, 8, None, None, 5, 7, 7, "DesiredWithinRange"),
    Case("prenormalized desired replicas < minReplicas", [], [], 2, 8, None, None, 3, 1, 2, "TooFewReplicas"),
    Case(
        "prenormalized desired replicas within range when minReplicas is 0",
        [],
        [],
        0,
        10,
        None,
        None,
        1,
        0,
        0,
        "DesiredWithinRange",
    ),
    Case(
        "maxReplicas is the limit because maxReplicas < scaleUpLimit",
        [],
        [],
        1,
        10,
        None,
        None,
        20,
        1000,
        10,
        "TooManyReplicas",
    ),
    Case(
        "desired replica count is more than the maximum replica count",
        [],
        [],
        100,
        150,
        None,
        None,
        100,
        1000,
        150,
        "TooManyReplicas",
    ),
    Case(
        "scaleUpLimit is the limit because scaleUpLimit < maxReplicas with user policies",
        [],
        [],
        1,
        2000,
        rules(0, 0, 1, 60, 0),
        None,
        3,
        1000,
        4,
        "ScaleUpLimit",
    ),
    Case("scaleUp with default behavior", [], [], 1, 1000, None, None, 10, 50, 20, "ScaleUpLimit"),
    Case(
        "scaleUp with pods policy larger than percent policy",
        [],
        [],
        1,
        1000,
        rules(100, 60, 100, 60, 0),
        None,
        10,
        500,
        110,
        "ScaleUpLimit",
    ),
    Case(
        "scaleUp with percent policy larger than pods policy",
        [],
        [],
        1,
        1000,
        rules(2, 60, 100, 60, 0),
        None,
        10,
        500,
        20,
        "ScaleUpLimit",
    ),
    Case(
        "scaleUp with spec MaxReplicas limitation with large pod policy",
        [],
        [],
        1,
        1000,
        rules(100, 60, 0, 0, 0),
        None,
        10,
        50,
        50,
        "DesiredWithinRange",
    ),
    Case(
        "scaleUp with pod policy limitation", [], [], 1, 1000, rules(30, 60, 0, 0, 0), None, 10, 50, 40, "ScaleUpLimit"
    ),
    Case(
        "scaleUp with percent policy limitation",
        [],
        [],
        1,
        1000,
        rules(0, 0, 200, 60, 0),
        None,
        10,
        50,
        30,
        "ScaleUpLimit",
    ),
    Case(
        "scaleDown with percent policy larger than pod policy",
        [],
        [],
        1,
        1000,
        None,
        rules(20, 60, 1, 60, 300),
        100,
        2,
        80,
        "ScaleDownLimit",
    ),
    Case(
        "scaleDown with pod policy larger than percent policy",
        [],
        [],
        1,
        1000,
        None,
        rules(2, 60, 1, 60, 300),
        100,
        2,
        98,
        "ScaleDownLimit",
    ),
    Case(
        "scaleDown with spec MinReplicas limitation with large pod policy",
        [],
        [],
        1,
        1000,
        None,
        rules(100, 60, 0, 0, 300),
        10,
        0,
        1,
        "TooFewReplicas",
    ),
    Case(
        "scaleDown with spec MinReplicas limitation with large percent policy",
        [],
        [],
        5,
        1000,
        None,
        rules(0, 0, 100, 60, 300),
        10,
        2,
        5,
        "TooFewReplicas",
    ),
    Case(
        "scaleDown with pod policy limitation",
        [],
        [],
        1,
        1000,
        None,
        rules(5, 60, 0, 0, 300),
        10,
        2,
        5,
        "ScaleDownLimit",
    ),
    Case(
        "scaleDown with percent policy limitation",
        [],
        [],
        1,
        1000,
        None,
        rules(0, 0, 50, 60, 300),
        10,
        5,
        5,
        "DesiredWithinRange",
    ),
    Case(
        "scaleUp with spec MaxReplicas limitation with large pod policy and events",
        spread([1, 5, 9], 120),
        [],
        1,
        200,
        rules(300, 60, 0, 0, 0),
        None,
        100,
        500,
        200,
        "TooManyReplicas",
    ),
    Case(
        "scaleUp with currentReplicas limitation with rate.PeriodSeconds with a lot of recent scale up events",
        spread([1, 5, 9], 120),
        [],
        1,
        1000,
        rules(5, 120, 0, 0, 0),
        None,
        100,
        500,
        100,
        "ScaleUpLimit",
    ),
    Case(
        "scaleUp with pod policy and previous scale up events",
        spread([1, 5, 9], 120),
        [],
        1,
        1000,
        rules(150, 120, 0, 0, 0),
        None,
        100,
        500,
        235,
        "ScaleUpLimit",
    ),
    Case(
        "scaleUp with percent policy and previous scale up events",
        spread([1, 5, 9], 120),
        [],
        1,
        1000,
        rules(0, 0, 200, 120, 0),
        None,
        100,
        500,
        255,
        "ScaleUpLimit",
    ),
    Case(
        "scaleDown with default policy and previous events",
        [],
        spread([1, 5, 9], 120),
        1,
        1000,
        None,
        None,
        10,
        5,
        5,
        "DesiredWithinRange",
    ),
    Case(
        "scaleDown with spec MinReplicas limitation with large pod policy and previous events",
        [],
        spread([1, 5, 9], 120),
        5,
        1000,
        None,
        rules(130, 120, 0, 0, 300),
        100,
        0,
        5,
        "TooFewReplicas",
    ),
    Case(
        "scaleDown with pod policy limitation and previous events",
        [],
        spread([1, 5, 9], 120),
        1,
        1000,
        None,
        rules(5, 120, 0, 0, 300),
        100,
        2,
        100,
        "ScaleDownLimit",
    ),
    Case(
        "scaleDown with percent policy limitation and previous events",
        [],
        spread([2, 4, 6], 120),
        1,
        1000,
        None,
        rules(0, 0, 50, 120, 300),
        100,
        0,
        56,
        "ScaleDownLimit",
    ),
    Case(
        "scaleDown with previous events preventing further scale down",
        [],
        spread([10, 10, 10], 120),
        1,
        1000,
        None,
        rules(0, 0, 10, 120, 300),
        100,
        0,
        100,
        "ScaleDownLimit",
    ),
    Case(
        "scaleDown with with previous events still allowing more scale down",
        [],
        spread([10, 10, 10], 120),
        1,
        1000,
        None,
        rules(0, 0, 1000, 120, 300),
        10,
        5,
        5,
        "DesiredWithinRange",
    ),
    Case(
        "check that events were marked 'outdated' for two different policies in the behavior for up",
        spread([8, 12, 9, 11], 120),
        [],
        1,
        1000,
        rules(1000, 30, 100, 60, 0),
        None,
        100,
        200,
        200,
        "DesiredWithinRange",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_policies_and_bounds_against_test_scaling_with_rules(case: Case) -> None:
    bounds = Bounds(case.min_replicas, case.max_replicas)
    events = (case.up_events, case.down_events)
    got = convert_with_behavior(
        case.current, case.desired, bounds, up(case.up_rules), down(case.down_rules), events, NOW
    )
    assert got == (case.expected, case.condition)


def test_select_policy_min_takes_the_smallest_change() -> None:
    # TestCalculateScaleUpLimitWithScalingRules and TestCalculateScaleDownLimitWithBehaviors: Pods 2 and
    # Percent 50 per 60 s, selectPolicy Min: from 1 the limit is 2, from 5 it is 3
    both = (ScalingPolicy("Pods", 2, 60), ScalingPolicy("Percent", 50, 60))
    rules_min = FilledRules(300, "Min", both, None)
    assert scale_up_limit(1, [], [], rules_min, NOW) == 2
    assert scale_down_limit(5, [], [], rules_min, NOW) == 3


def test_select_policy_disabled_keeps_the_current_replicas() -> None:
    disabled = FilledRules(0, "Disabled", DEFAULT_SCALE_UP.policies or (), None)
    assert convert_with_behavior(3, 10, Bounds(1, 10), disabled, down(None), ([], []), NOW) == (3, "ScaleUpLimit")


def test_the_docs_scale_down_example_removes_8_then_8_then_4_at_a_time() -> None:
    # kubernetes.io, "Horizontal Pod Autoscaling", scaling policies: Pods 4 and Percent 10 per 60 s; from 80
    # replicas towards 10 the first step removes 8, at 72 10 % is 7.2 and 8 are removed; below 40 replicas the
    # Pods policy (4) removes more than 10 % does
    policies = down(ScalingRules(policies=(ScalingPolicy("Pods", 4, 60), ScalingPolicy("Percent", 10, 60))))
    assert convert_with_behavior(80, 10, Bounds(1, 100), up(None), policies, ([], []), NOW)[0] == 72
    assert convert_with_behavior(72, 10, Bounds(1, 100), up(None), policies, ([], []), NOW)[0] == 64
    assert convert_with_behavior(39, 10, Bounds(1, 100), up(None), policies, ([], []), NOW)[0] == 35
    # within the period the step already taken counts: 15 s after 80 → 72, 72 is still the limit
    taken = [ScaleEvent(8, NOW - 15)]
    assert convert_with_behavior(72, 10, Bounds(1, 100), up(None), policies, ([], taken), NOW)[0] == 72


def test_the_default_scale_up_adds_4_pods_or_doubles_per_15_seconds() -> None:
    # kubernetes.io, default behavior: 4 pods or 100 % of the current replicas every 15 s, the larger
    assert convert_with_behavior(1, 100, Bounds(1, 100), up(None), down(None), ([], []), NOW)[0] == 5
    assert convert_with_behavior(10, 100, Bounds(1, 100), up(None), down(None), ([], []), NOW)[0] == 20
    # 10 s after going 5 → 10 the period started at 5: max(5 + 4, 2 x 5) = 10, no further step yet
    recent: tuple[list[ScaleEvent], list[ScaleEvent]] = ([ScaleEvent(5, NOW - 10)], [])
    assert convert_with_behavior(10, 100, Bounds(1, 100), up(None), down(None), recent, NOW) == (10, "ScaleUpLimit")


def at(recs: list[tuple[int, int]]) -> list[Recommendation]:
    """Recommendations given as (replicas, seconds relative to NOW)."""
    return [Recommendation(replicas, NOW + offset) for replicas, offset in recs]


@pytest.mark.parametrize(
    ("name", "recs", "desired", "expected", "kept"),
    [
        ("empty log", [], 5, 5, [5]),
        ("stabilize", [(4, -120), (5, -60)], 3, 5, [4, 5, 3]),
        ("no stabilize", [(1, -120), (2, -60)], 3, 3, [1, 2, 3]),
        ("no stabilize - old recommendations", [(10, -600), (9, -540)], 3, 3, [10, 3]),
        ("stabilize - old recommendations", [(10, -600), (4, -60), (5, -120), (9, -540)], 3, 5, [10, 4, 5, 3]),
    ],
)
def test_the_path_without_behavior_against_test_normalize_desired_replicas(
    name: str, recs: list[tuple[int, int]], desired: int, expected: int, kept: list[int]
) -> None:
    log = at(recs)
    assert stabilize_legacy(log, NOW, 300, desired) == expected, name
    assert [r.replicas for r in log] == kept, name


@pytest.mark.parametrize(
    ("name", "recs", "current", "desired", "up_window", "down_window", "expected", "kept"),
    [
        ("empty recommendations for scaling down", [], 100, 5, 0, 0, 5, [5]),
        ("simple scale down stabilization", [(4, -120), (5, -60)], 100, 3, 0, 180, 5, [4, 5, 3]),
        ("simple scale up stabilization", [(4, -120), (5, -60)], 1, 7, 300, 0, 4, [4, 5, 7]),
        ("no scale down stabilization", [(1, -120), (2, -60)], 100, 3, 300, 0, 3, [1, 2, 3]),
        ("no scale up stabilization", [(4, -120), (5, -60)], 1, 3, 0, 300, 3, [4, 5, 3]),
        ("no scale down stabilization, reuse recommendation element", [(10, -600), (9, -540)], 100, 3, 0, 0, 3,
         [10, 3]),
        ("no scale up stabilization, reuse recommendation element", [(10, -600), (9, -540)], 1, 100, 0, 0, 100,
         [10, 100]),
        ("scale down stabilization, reuse one of obsolete recommendation element",
         [(10, -600), (4, -60), (5, -120), (9, -540)], 100, 3, 0, 180, 5, [10, 4, 5, 3]),
        ("scale up stabilization, reuse one of obsolete recommendation element",
         [(10, -6000), (6, -60), (5, -120), (9, -180)], 1, 100, 300, 0, 5, [100, 6, 5, 9]),
    ],
)  # fmt: skip
def test_windows_against_test_normalize_desired_replicas_with_behavior(
    name: str,
    recs: list[tuple[int, int]],
    current: int,
    desired: int,
    up_window: int,
    down_window: int,
    expected: int,
    kept: list[int],
) -> None:
    log = at(recs)
    assert stabilize(log, NOW, up_window, down_window, current, desired) == expected, name
    assert [r.replicas for r in log] == kept, name


@pytest.mark.parametrize(
    ("name", "previous", "policies", "changed", "after", "outdated"),
    [
        ("one outdated entry to be replaced with behavior", [(7, -61)], rules(10, 60, 100, 60, 0), 0, [5], [False]),
        ("one actual entry to be not touched with behavior", [(7, -58)], rules(10, 60, 100, 60, 0), 7, [7, 5],
         [False, False]),
        ("two entries, one of them to be replaced", [(7, -61), (6, -59)], rules(10, 60, 0, 0, 0), 6, [5, 6],
         [False, False]),
        ("replace one entry, use policies with different periods", [(8, -29), (6, -59), (7, -61), (9, -61)],
         rules(10, 60, 100, 30, 0), 14, [8, 6, 7, 5], [False, False, True, False]),
        ("two entries, both actual", [(7, -58), (6, -59)], rules(10, 120, 100, 30, 0), 13, [7, 6, 5],
         [False, False, False]),
    ],
)  # fmt: skip
def test_scale_events_against_test_store_scale_events(
    name: str,
    previous: list[tuple[int, int]],
    policies: ScalingRules,
    changed: int,
    after: list[int],
    outdated: list[bool],
) -> None:
    events = [ScaleEvent(c, NOW + offset) for c, offset in previous]
    assert replicas_changed(60, events, NOW) == changed, name
    store_event(events, up(policies), 5, NOW)
    assert [e.change for e in events] == after, name
    assert [e.outdated for e in events] == outdated, name
