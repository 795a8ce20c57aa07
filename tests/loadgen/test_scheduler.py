"""``serve``'s scheduler, step by step, in cases worked by hand: who is admitted, in what order, what KV each holds."""

import random

from loadgen.serving.request import Request
from loadgen.serving.scheduler import Limits, Scheduler, Step


def requests(*sizes: tuple[int, int]) -> list[Request]:
    """Requests 0, 1, ... of (prompt, output) tokens, all arrived at 0."""
    return [Request(i, 0.0, prompt, output) for i, (prompt, output) in enumerate(sizes)]


def scheduler(limits: Limits, *sizes: tuple[int, int]) -> Scheduler:
    s = Scheduler(limits)
    for r in requests(*sizes):
        s.add(r)
    return s


def ran(step: Step) -> list[tuple[int, int]]:
    return [(s.request.id, s.tokens) for s in step.scheduled]


def test_the_batch_limit_admits_the_first_arrivals_and_keeps_the_rest_waiting_in_order() -> None:
    s = scheduler(Limits(max_batch=2, kv_tokens=1000, max_step_tokens=1000), (10, 5), (20, 5), (30, 5), (40, 5))
    step = s.schedule(0.0)
    assert ran(step) == [(0, 10), (1, 20)]  # each computes its prompt
    assert (s.running_ids(), s.waiting_ids()) == ([0, 1], [2, 3])
    assert s.kv_used == 30
    s.complete(step, 0.1)
    assert ran(s.schedule(0.1)) == [(0, 1), (1, 1)]  # then a token each; the batch stays full
    assert s.waiting_ids() == [2, 3]


def test_the_kv_cache_admits_what_fits_and_the_head_that_does_not_blocks_the_queue() -> None:
    s = scheduler(Limits(max_batch=8, kv_tokens=25, max_step_tokens=1000), (10, 3), (10, 3), (10, 3), (2, 3))
    step = s.schedule(0.0)
    assert ran(step) == [(0, 10), (1, 10)]  # 20 of 25 slots; request 2 needs 10 of the 5 left
    assert s.waiting_ids() == [2, 3]  # and request 3, which would fit, waits behind it (FIFO)
    s.complete(step, 0.1)
    step = s.schedule(0.1)
    assert ran(step) == [(0, 1), (1, 1)]
    assert (s.kv_used, s.kv_usage) == (22, 22 / 25)


def test_the_step_token_budget_limits_the_prompts_one_step_admits() -> None:
    s = scheduler(Limits(max_batch=8, kv_tokens=1000, max_step_tokens=25), (10, 3), (10, 3), (10, 3))
    assert ran(s.schedule(0.0)) == [(0, 10), (1, 10)]
    assert s.waiting_ids() == [2]


def test_first_tokens_prompt_tokens_and_a_finishing_request_freeing_its_kv() -> None:
    s = scheduler(Limits(max_batch=4, kv_tokens=100, max_step_tokens=100), (10, 2), (5, 3))
    step = s.schedule(0.0)
    outcome = s.complete(step, 0.5)
    assert [r.id for r in outcome.first_tokens] == [0, 1]
    assert (outcome.tokens, outcome.generated, outcome.prompt_tokens) == (15, 2, 15)
    first = outcome.first_tokens[0]
    assert (first.scheduled, first.first_token, first.generated, first.kv) == (0.0, 0.5, 1, 10)
    outcome = s.complete(s.schedule(0.5), 0.6)
    assert [r.id for r in outcome.finished] == [0]  # 2 tokens: it leaves, with its 11 slots
    assert (outcome.prompt_tokens, outcome.first_tokens) == (0, [])  # prompts are counted once
    assert (s.running_ids(), s.kv_used) == ([1], 6)
    outcome = s.complete(s.schedule(0.6), 0.7)
    assert [r.id for r in outcome.finished] == [1]
    assert (s.kv_used, s.idle) == (0, True)
    assert outcome.finished[0].queue_time == 0.0


def test_a_request_holds_its_prompt_and_each_token_fed_back_in() -> None:
    s = scheduler(Limits(max_batch=1, kv_tokens=100, max_step_tokens=100), (10, 4))
    kv = []
    while not s.idle:
        s.complete(s.schedule(0.0), 0.0)
        kv.append(s.kv_used)
    assert kv == [10, 11, 12, 0]  # the 4th token is sampled, never fed back: 13 slots at most, freed at the end


def test_when_kv_runs_out_the_last_admitted_is_preempted_to_the_head_of_the_queue_and_recomputes() -> None:
    s = scheduler(Limits(max_batch=4, kv_tokens=12, max_step_tokens=100), (4, 8), (4, 8))
    for t in (0.0, 0.1, 0.2):
        s.complete(s.schedule(t), t + 0.1)
    assert s.kv_used == 12  # each: its prompt and the 2 tokens fed back since
    step = s.schedule(0.3)
    assert (ran(step), step.preempted) == ([(0, 1)], 1)  # 1 gave its 6 slots back so that 0 goes on
    assert (s.running_ids(), s.waiting_ids(), s.kv_used) == ([0], [1], 7)
    s.complete(step, 0.4)
    step = s.schedule(0.4)
    assert ran(step) == [(0, 1)]  # 1 needs 7 slots again (its prompt and 3 tokens): 4 are free
    s.complete(step, 0.5)
    for t in (0.5, 0.6, 0.7):
        s.complete(s.schedule(t), t + 0.1)
    assert (s.running_ids(), s.kv_used) == ([], 0)  # 0 has its 8 tokens
    step = s.schedule(0.8)
    assert ran(step) == [(1, 7)]  # recomputed in one step
    request = step.scheduled[0].request
    assert (request.preemptions, request.generated, request.queue_time) == (1, 3, 0.0)  # its first wait only


def test_a_step_that_preempts_admits_nobody() -> None:
    s = scheduler(Limits(max_batch=4, kv_tokens=10, max_step_tokens=100), (4, 5), (4, 5))
    s.complete(s.schedule(0.0), 0.1)
    s.complete(s.schedule(0.1), 0.2)
    assert s.kv_used == 10
    s.add(Request(9, 0.15, 1, 1))
    step = s.schedule(0.2)
    assert step.preempted == 1
    assert s.waiting_ids() == [1, 9]  # the preempted request goes first; the new one waits for the next step


def test_quiet_decodes_stop_before_the_first_request_finishes() -> None:
    s = scheduler(Limits(max_batch=4, kv_tokens=1000, max_step_tokens=1000), (10, 5), (10, 9))
    s.complete(s.schedule(0.0), 0.1)  # both have their first token: 4 and 8 to go
    assert s.quiet_decodes() == 3  # the 4th step from here finishes request 0


def test_quiet_decodes_stop_before_the_kv_cache_would_preempt() -> None:
    s = scheduler(Limits(max_batch=4, kv_tokens=30, max_step_tokens=1000), (10, 50), (10, 50))
    s.complete(s.schedule(0.0), 0.1)
    assert s.kv_used == 20
    assert s.quiet_decodes() == 5  # 5 steps fill the 10 free slots exactly; the 6th preempts


def test_quiet_decodes_are_none_when_the_next_step_admits_the_head_of_the_queue() -> None:
    s = scheduler(Limits(max_batch=4, kv_tokens=1000, max_step_tokens=1000), (10, 50))
    s.complete(s.schedule(0.0), 0.1)
    assert s.quiet_decodes() == 48
    s.add(Request(1, 0.1, 10, 5))
    assert s.quiet_decodes() == 0
    full = scheduler(Limits(max_batch=1, kv_tokens=1000, max_step_tokens=1000), (10, 50), (10, 5))
    full.complete(full.schedule(0.0), 0.1)
    assert full.quiet_decodes() == 48  # the batch is full: request 1 waits whatever happens until 0 finishes


def test_decoding_quietly_leaves_the_scheduler_as_stepping_through_each_step_does() -> None:
    """Random workloads: wherever quiet decodes are counted, taking them at once ends in the same state, request by
    request, as scheduling and completing each of them."""
    rng = random.Random(5)
    for case in range(200):
        limits = Limits(rng.randint(1, 6), rng.randint(45, 120), rng.randint(45, 64))
        # every request fits the KV cache and a step alone (prompt and output within 45), as an engine makes sure of
        sizes = [(rng.randint(1, 12), rng.randint(1, 30)) for _ in range(rng.randint(1, 10))]
        stepped, jumped = scheduler(limits, *sizes), scheduler(limits, *sizes)
        t = 0.0
        while not stepped.idle:
            quiet = stepped.quiet_decodes()
            assert quiet == jumped.quiet_decodes()
            if quiet:
                for _ in range(quiet):
                    step = stepped.schedule(t)
                    assert all(s.tokens == 1 for s in step.scheduled), case
                    assert not step.preempted, case
                    outcome = stepped.complete(step, t)
                    assert not outcome.finished, case
                    assert not outcome.first_tokens, case
                jumped.decode_quietly(quiet)
            for s in (stepped, jumped):
                s.complete(s.schedule(t), t)
            t += 1
            state = [(r.id, r.generated, r.kv) for r in (*stepped._running, *stepped._waiting)]
            assert state == [(r.id, r.generated, r.kv) for r in (*jumped._running, *jumped._waiting)], case
            assert (stepped.kv_used, stepped.waiting_ids()) == (jumped.kv_used, jumped.waiting_ids()), case
