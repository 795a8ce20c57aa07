"""The replay's mechanisms on traces worked by hand: every step of a replica costs 10 ms, so each time below follows
from the scheduler's rules (loadgen/serving/scheduler.py) and the lifecycle's."""

import random
from dataclasses import dataclass

import pytest

from harness.replay import FLAT, STEP, Scripted
from loadgen.autoscaling import Behavior, HpaSpec, MetricSpec, ScaledObject, ScalingRules, Trigger
from loadgen.replay.cost_model import load_profile
from loadgen.replay.pipeline import GpuSample
from loadgen.replay.replica import Phase, ReplayRequest, Replica
from loadgen.replay.simulation import Outcome, Settings, Simulation
from loadgen.replay.trace import Arrival
from loadgen.serving.scheduler import Limits

TRIGGER = (Trigger("inference_demand", 5.0),)  # no value is served in these tests: never active
AT_ONCE = Behavior(scale_down=ScalingRules(stabilization_window_seconds=0))  # no 300 s window before scaling down


@dataclass(frozen=True)
class Fixed:
    name: str = "fixed"
    hpa: HpaSpec | None = None
    keda: ScaledObject | None = None


def run(arrivals: list[Arrival], initial: int = 1, policy: Fixed | None = None, metrics: Scripted | None = None,
        **settings: float) -> Outcome:  # fmt: skip
    limits = Limits(max_batch=8, kv_tokens=1000, max_step_tokens=1000)
    s = Settings(limits=limits, **settings)  # type: ignore[arg-type]
    return Simulation(arrivals, policy or Fixed(), s, FLAT, metrics or Scripted(), initial).run()


def test_a_request_gets_its_first_token_at_the_end_of_the_step_that_computes_its_prompt() -> None:
    out = run([Arrival(0.0, 100, 3), Arrival(1.0, 100, 1)])
    first, second = out.requests
    assert first.first_token == pytest.approx(STEP)
    assert first.finished == pytest.approx(3 * STEP)  # a token a step
    assert second.first_token == pytest.approx(1.0 + STEP)
    assert second.finished == pytest.approx(1.0 + STEP)


def test_a_request_arriving_during_a_step_waits_for_its_end() -> None:
    out = run([Arrival(0.0, 10, 5), Arrival(0.005, 10, 2)])
    assert out.requests[1].scheduled == pytest.approx(STEP)
    assert out.requests[1].first_token == pytest.approx(2 * STEP)


def test_the_quiet_decodes_give_the_same_times_as_stepping() -> None:
    # one long request decodes alone, in a run of quiet decodes; a second arrives 0.505 s in, during the step from
    # 0.50 to 0.51, and is admitted at that step's end as when every step is taken one by one
    out = run([Arrival(0.0, 10, 100), Arrival(0.505, 10, 1)])
    long, short = out.requests
    assert short.scheduled == pytest.approx(0.51)
    assert short.first_token == pytest.approx(0.52)
    assert long.finished == pytest.approx(100 * STEP)  # the admitting step gave it a token too


def test_requests_wait_at_the_gateway_for_a_replica_and_each_goes_to_the_least_loaded() -> None:
    # no replica at the start: KEDA scales 0 -> 1 at its first poll (30 s), the pod is ready 60 s later
    keda = ScaledObject(TRIGGER, min_replica_count=0, max_replica_count=2)
    metrics = Scripted()
    out = run([Arrival(0.0, 10, 1), Arrival(1.0, 10, 1)], initial=0, policy=Fixed("keda", keda=keda),
              metrics=metrics)  # fmt: skip
    assert all(r.held for r in out.requests)
    assert [s.gateways[0].queue_size for s in metrics.scrapes[:2]] == [2, 2]


def test_a_gateway_hold_is_released_when_the_replica_is_ready() -> None:
    keda = ScaledObject(TRIGGER, min_replica_count=1, max_replica_count=1)
    out = run([Arrival(0.0, 10, 1)], initial=0, policy=Fixed("keda", keda=keda), cold_start=60.0)
    # below minReplicaCount: KEDA sets 1 at its first poll, 30 s in; ready at 90 s
    (request,) = out.requests
    assert request.held
    assert out.replicas[0].created == 30.0
    assert request.first_token == pytest.approx(90.0 + STEP)


def test_gpu_seconds_count_loading_and_end_at_the_last_arrival() -> None:
    keda = ScaledObject(TRIGGER, min_replica_count=1, max_replica_count=1)
    out = run([Arrival(0.0, 10, 1), Arrival(200.0, 10, 1)], initial=0, policy=Fixed("keda", keda=keda))
    assert out.gpu_seconds == pytest.approx(200.0 - 30.0)  # created at 30 s, counted to the trace's end


def test_least_loaded_routing_spreads_requests_over_ready_replicas() -> None:
    out = run([Arrival(0.0, 10, 50), Arrival(0.001, 10, 50), Arrival(0.002, 10, 50)], initial=2)
    sched = [r.scheduled for r in out.requests]
    # the first two go to the two idle replicas and start at once; the third to one of them, after its first step
    assert sched[:2] == [pytest.approx(0.0), pytest.approx(0.001)]
    assert sched[2] == pytest.approx(STEP)


def test_scaling_down_deletes_the_newest_ready_replica_which_drains_within_its_grace_period() -> None:
    # an HPA that wants 1 replica from 2: at its first sync (15 s) one pod is deleted while it holds a request of
    # 2,000 tokens (20 s of steps): the grace period (5 s) cuts it
    hpa = HpaSpec((MetricSpec("inference_requests_running", "Pods", 1000.0),), max_replicas=2, behavior=AT_ONCE)
    arrivals = [Arrival(0.0, 10, 10), Arrival(10.0, 10, 2000)]
    out = run(arrivals, initial=2, policy=Fixed("hpa", hpa=hpa), metrics=Scripted(pods=1.0), grace=5.0)
    deleted = [r for r in out.replicas if r.deleted is not None]
    assert len(deleted) == 1
    assert deleted[0].deleted == 15.0
    assert deleted[0].gone == 20.0
    assert deleted[0].phase is Phase.GONE
    cut = [r for r in out.requests if r.cut]
    assert [r.output for r in cut] == [2000]


def test_a_drained_replica_goes_when_its_last_request_finishes() -> None:
    hpa = HpaSpec((MetricSpec("inference_requests_running", "Pods", 1000.0),), max_replicas=2, behavior=AT_ONCE)
    arrivals = [Arrival(13.0, 10, 300), Arrival(13.0, 10, 300)]  # each replica decodes one: 3 s of steps
    out = run(arrivals, initial=2, policy=Fixed("hpa", hpa=hpa), metrics=Scripted(pods=1.0), grace=30.0)
    (deleted,) = [r for r in out.replicas if r.deleted is not None]
    assert deleted.gone == pytest.approx(13.0 + 300 * STEP)
    assert not any(r.cut for r in out.requests)


def test_a_loading_pod_is_scraped_for_its_gpu_only() -> None:
    keda = ScaledObject(TRIGGER, min_replica_count=1, max_replica_count=1)
    metrics = Scripted()
    run([Arrival(0.0, 10, 1), Arrival(100.0, 10, 1)], initial=0, policy=Fixed("keda", keda=keda), metrics=metrics)
    at_45 = next(s for s in metrics.scrapes if s.at == 45.0)
    # created at 30 s, loading until 90 s: its GPU is on the collector's page, its engine serves none yet
    assert (list(at_45.engines), list(at_45.gpus)) == ([], [GpuSample("replay", "engine-0", "node-0", 0.0)])
    at_90 = next(s for s in metrics.scrapes if s.at == 90.0)
    assert at_90.engines[0].waiting == 0  # ready: its engine's series are there


def test_a_replica_taking_quiet_decodes_at_once_gives_every_request_the_times_stepping_gives() -> None:
    """Random requests into one replica with the H100 profile's step costs (which grow with the context), once with
    quiet decodes and once stepping through every step: the same first tokens, ends and counters."""
    cost = load_profile()
    limits = Limits(max_batch=6, kv_tokens=3000, max_step_tokens=2000)
    rng = random.Random(11)
    arrivals = sorted((rng.uniform(0, 20), rng.randint(1, 600), rng.randint(1, 300)) for _ in range(120))
    outcomes = []
    for quiet in (True, False):
        replica = Replica(0, -1.0, 1.0, limits, cost)
        replica.became_ready()
        if not quiet:
            replica.scheduler.quiet_decodes = lambda: 0  # type: ignore[method-assign]
        requests = [ReplayRequest(i, at, p, o) for i, (at, p, o) in enumerate(arrivals)]
        for r in requests:
            replica.advance_to(r.arrival)
            replica.add(r, r.arrival)
        replica.advance_to(10_000.0)
        outcomes.append(([(r.first_token, r.finished, r.preemptions) for r in requests], replica.counters))
    (fast, fast_counters), (slow, slow_counters) = outcomes
    for (f1, e1, p1), (f2, e2, p2) in zip(fast, slow, strict=True):
        assert (f1, e1, p1) == (pytest.approx(f2), pytest.approx(e2), p2)  # type: ignore[comparison-overlap]
    assert fast_counters.generated == slow_counters.generated
    assert fast_counters.ttft_sum == pytest.approx(slow_counters.ttft_sum)
    assert any(p for _, _, p in slow)  # the KV cache ran out on the way: preemptions were part of it


def test_a_scaled_object_starting_with_replicas_cools_down_from_the_start_not_before_it() -> None:
    # no trigger has a value (no metric history yet): inactive from the first poll; the replicas the replay starts
    # with served until the trace began, so KEDA takes them to zero only after its cooldown (300 s), at a poll
    keda = ScaledObject(TRIGGER, min_replica_count=0, max_replica_count=2, cooldown_period=300.0)
    out = run([Arrival(0.0, 10, 1), Arrival(1000.0, 10, 1)], initial=1, policy=Fixed("keda", keda=keda))
    assert out.replicas[0].deleted == 330.0  # the first poll after 300 s (KEDA's comparison is strict)


@pytest.mark.parametrize(("flow_control", "first_token"), [(False, 6.0 + STEP), (True, 1.0 + STEP)])
def test_flow_control_holds_at_the_gateway_what_a_saturated_engine_would_queue(
    flow_control: bool, first_token: float
) -> None:
    # replica A serves one request at a time (1 s each); B is created at 0 and ready at 1 s. The 7th request finds A
    # with 5 waiting (saturated): without flow control it queues behind them in A (its turn at 6 s), with it, it
    # waits at the gateway and goes to B as B comes up
    limits = Limits(max_batch=1, kv_tokens=1000, max_step_tokens=1000)
    settings = Settings(cold_start=1.0, limits=limits, flow_control=flow_control)
    arrivals = [Arrival(0.0, 1, 100) for _ in range(7)]
    out = Simulation(arrivals, Fixed(), settings, FLAT, Scripted(), 1, schedule=[(0.0, 2)]).run()
    last = out.requests[-1]
    assert last.first_token == pytest.approx(first_token, abs=0.06)  # within one dispatch tick (50 ms)
    assert not last.held  # a replica was ready: it did not wait for a cold start
