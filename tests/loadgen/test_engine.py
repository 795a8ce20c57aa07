"""``serve``'s engine loop on a clock of its own with simulated steps: the times worked by hand, no waiting.

Step costs and arrival times are multiples of powers of two, so that the sums are exact in floating point.
"""

import io

import pytest

from harness.serving import Listed
from loadgen.serving.arrivals import TokenRange
from loadgen.serving.engine import Engine, measure_capacity
from loadgen.serving.metrics import EngineMetrics
from loadgen.serving.progress import Progress
from loadgen.serving.request import Request
from loadgen.serving.scheduler import Limits, Scheduler
from loadgen.serving.steps import ModelClock, SimulatedSteps, StepCost


def engine(limits: Limits, cost: StepCost, *requests: Request, progress: Progress | None = None) -> Engine:
    clock = ModelClock()
    return Engine(Scheduler(limits), SimulatedSteps(clock, cost), Listed(*requests), EngineMetrics("m"), clock,
                  progress)  # fmt: skip


def test_ttft_is_the_wait_for_the_running_step_plus_the_step_that_computes_the_prompt() -> None:
    a = Request(0, 0.0, prompt=96, output=3)
    b = Request(1, 0.0625, prompt=32, output=2)  # arrives while a's prompt is computed
    e = engine(Limits(), StepCost(fixed=0.0625, per_token=2**-9), a, b)
    totals = e.run(10.0)
    # step 1 [0, 0.25]: a's 96 prompt tokens (0.0625 + 96/512); a's first token at its end
    assert (a.scheduled, a.first_token) == (0.0, 0.25)
    # step 2 [0.25, 0.375]: a decodes 1 token, b computes 32: 0.0625 + 33/512 = 0.1269..., rounded by the sum
    assert b.scheduled == 0.25
    assert b.queue_time == 0.25 - 0.0625
    assert b.first_token == pytest.approx(0.25 + 0.0625 + 33 / 512)
    ttft_b = b.first_token - b.arrival  # type: ignore[operator]
    assert ttft_b == pytest.approx(b.queue_time + 0.0625 + 33 / 512)
    # step 3: a's 3rd and b's 2nd token; both finish and give back their slots
    assert (totals.steps, totals.finished, totals.generation_tokens, totals.prompt_tokens) == (3, 2, 5, 128)
    assert (a.generated, b.generated, e.scheduler.kv_used, e.scheduler.idle) == (3, 2, 0, True)
    assert e.metrics.registry.get_sample_value(
        "vllm:time_to_first_token_seconds_sum", {"model_name": "m", "engine": "0"}
    ) == pytest.approx(0.25 + ttft_b)


def test_the_queue_grows_when_requests_come_faster_than_the_engine_finishes_them() -> None:
    # one request at a time, 4 steps of 1/8 s each: 2 requests per second served, 4 arriving
    arrivals = [Request(i, i / 4, prompt=1, output=4) for i in range(100)]
    out = io.StringIO()
    e = engine(Limits(max_batch=1), StepCost(fixed=0.125, per_token=0.0), *arrivals, progress=Progress(out, 1.0))
    totals = e.run(4.1)
    # request k runs from 0.5 k to 0.5 (k + 1): its first token at 0.5 k + 1/8, 1/4 k + 1/8 after it arrived
    assert [r.first_token - r.arrival for r in arrivals[:9]] == [k / 4 + 1 / 8 for k in range(9)]  # type: ignore[operator]
    # at 4.125 s: 17 arrived (0 to 4 s), 8 finished, 1 running, 8 waiting
    assert (totals.arrivals, totals.finished, e.scheduler.running, e.scheduler.waiting) == (17, 8, 1, 8)
    labels = {"model_name": "m", "engine": "0"}
    assert e.metrics.registry.get_sample_value("vllm:num_requests_waiting", labels) == 8
    # each second: 4 more arrived, 2 more finished (at 1, 2, 3 and 4 s the one running has just finished)
    waiting = [line.split(",")[1] for line in out.getvalue().splitlines()]
    assert waiting == [" waiting 3", " waiting 5", " waiting 7", " waiting 9"]


def test_an_idle_engine_waits_for_the_next_arrival_and_runs_no_steps() -> None:
    late = Request(0, 2.0, prompt=1, output=1)
    e = engine(Limits(), StepCost(fixed=0.25, per_token=0.0), late)
    totals = e.run(3.0)
    assert (late.scheduled, late.first_token) == (2.0, 2.25)
    assert (totals.steps, totals.busy_seconds) == (1, 0.25)
    assert e.elapsed >= 3.0


def test_a_stop_ends_the_run_after_the_step_in_progress() -> None:
    e = engine(Limits(), StepCost(fixed=0.25, per_token=0.0), *[Request(i, 0.0, 1, 100) for i in range(4)])
    totals = e.run(60.0, stop=lambda: e.totals.steps >= 3)
    assert (totals.steps, totals.generation_tokens, e.elapsed) == (3, 12, 0.75)


def test_capacity_is_the_generation_rate_with_the_batch_kept_full() -> None:
    clock = ModelClock()
    capacity = measure_capacity(
        SimulatedSteps(clock, StepCost(fixed=0.125, per_token=0.0)), Limits(max_batch=4), TokenRange(1, 1),
        TokenRange(4, 4), clock, seconds=2.0, warmup=1.0,
    )  # fmt: skip
    # 4 tokens a step, 8 steps a second; a request is 4 tokens
    assert (capacity.tokens_per_second, capacity.requests_per_second) == (32.0, 8.0)
    wide = measure_capacity(
        SimulatedSteps(clock, StepCost(fixed=0.125, per_token=0.0)), Limits(max_batch=64), TokenRange(1, 1),
        TokenRange(4, 4), clock, seconds=2.0, warmup=1.0,
    )  # fmt: skip
    # requests shorter than the batch is wide: 16 let in a step fill it, 64 tokens a step from then on
    assert (wide.tokens_per_second, wide.requests_per_second) == (512.0, 128.0)
