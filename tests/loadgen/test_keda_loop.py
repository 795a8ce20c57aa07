"""KEDA's loop (kedacore/keda pkg/scaling/executor/scale_scaledobjects.go RequestScale) over its HPA, on timelines
computed by hand from those rules."""

from __future__ import annotations

from loadgen.autoscaling import KedaLoop, Sample, ScaledObject, Trigger, keda_replica_series
from loadgen.autoscaling.spec import MetricSpec

WAITING = Trigger("waiting", 5)


def test_the_hpa_keda_creates() -> None:
    # controllers/keda/hpa.go: one External metric per trigger, AverageValue by default; GetHPAMinReplicas: 1 when
    # minReplicaCount is 0; GetHPAMaxReplicas: 100 by default
    spec = ScaledObject((WAITING,)).hpa_spec()
    assert (spec.metrics, spec.min_replicas, spec.max_replicas) == (
        (MetricSpec("waiting", "External", 5, "AverageValue"),),
        1,
        100,
    )


def test_zero_to_one_then_the_hpa_then_back_to_zero_after_the_cooldown() -> None:
    # pollingInterval 30 s, cooldownPeriod 300 s, HPA sync 15 s, the HPA without a behavior. Requests wait from
    # 40 s (12 of them) to 100 s.
    # - 0 to 30 s: inactive at 0 replicas; the HPA (minReplicas 1) is disabled at 0.
    # - 60 s: KEDA sees 12 > 0, scales 0 → 1; the HPA then asks ceil(12 / 5) = 3.
    # - 90 s: the last poll that sees activity (lastActiveTime 90).
    # - 105 s: the queue is 0, the HPA asks 0 but its 300 s window holds 3 until the 3 recorded at 90 s is older
    #   than 300 s: at 405 s it scales to minReplicas 1.
    # - KEDA scales 1 → 0 at the first poll after 90 + 300, strictly: 390 is not after 390, 420 is.
    samples = [Sample(0, {"waiting": 0}), Sample(40, {"waiting": 12}), Sample(100, {"waiting": 0}),
               Sample(450, {"waiting": 0})]  # fmt: skip
    series = keda_replica_series(ScaledObject((WAITING,)), samples)
    replicas = {(t, who): r for t, r, who in series}
    assert [replicas[(t, "hpa")] for t in (0, 15, 30, 45)] == [0, 0, 0, 0]
    assert (replicas[(60, "keda")], replicas[(60, "hpa")]) == (1, 3)
    assert [replicas[(t, "hpa")] for t in (105, 300, 390)] == [3, 3, 3]
    assert (replicas[(390, "keda")], replicas[(405, "hpa")], replicas[(420, "keda")]) == (3, 1, 0)


def test_activation_is_strictly_above_the_threshold() -> None:
    # the Prometheus scaler: active when value > activationThreshold
    loop = KedaLoop(ScaledObject((Trigger("waiting", 5, activation_threshold=3),)))
    assert loop.poll(0, 0, {"waiting": 3}).replicas == 0
    assert loop.poll(30, 0, {"waiting": 3.5}).replicas == 1


def test_from_zero_keda_goes_to_min_replica_count_and_never_below_it_without_idle() -> None:
    so = ScaledObject((WAITING,), min_replica_count=2)
    loop = KedaLoop(so)
    assert loop.poll(0, 0, {"waiting": 1}).replicas == 2  # scaleFromZeroOrIdle: minReplicaCount when above 0
    assert loop.poll(600, 2, {"waiting": 0}).replicas == 2  # inactive, minReplicaCount 2: no scale to 0
    assert loop.poll(630, 1, {"waiting": 0}).replicas == 2  # below minReplicaCount without idle: back to it


def test_idle_replica_count_after_the_cooldown_and_back_to_min_on_activity() -> None:
    so = ScaledObject((WAITING,), min_replica_count=2, idle_replica_count=0, cooldown_period=60)
    loop = KedaLoop(so)
    assert loop.poll(0, 2, {"waiting": 4}).replicas == 2  # active: the HPA scales; lastActiveTime 0
    assert loop.poll(60, 2, {"waiting": 0}).replicas == 2  # 0 + 60 is not before 60: cooling down
    assert loop.poll(90, 2, {"waiting": 0}).replicas == 0  # to idleReplicaCount
    assert loop.poll(120, 0, {"waiting": 4}).replicas == 2  # active below minReplicaCount: to minReplicaCount


def test_before_any_activity_the_initial_cooldown_counts_from_creation() -> None:
    # scaleToZeroOrIdle with no lastActiveTime: creation + initialCooldownPeriod (default 0) must be past
    loop = KedaLoop(ScaledObject((WAITING,), initial_cooldown_period=120), created_at=0)
    assert loop.poll(90, 1, {"waiting": 0}).replicas == 1
    assert loop.poll(150, 1, {"waiting": 0}).replicas == 0


def test_an_external_scalers_own_activity_decides_over_the_threshold() -> None:
    # the external scaler: KEDA takes IsActive's answer, whatever the value GetMetrics gave
    loop = KedaLoop(ScaledObject((WAITING,)))
    assert loop.poll(0, 0, {"waiting": 0}, active=True).replicas == 1
    assert loop.poll(400, 1, {"waiting": 12}, active=False).replicas == 0  # inactive past the 300 s cooldown
