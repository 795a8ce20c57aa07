"""The held answers alone: which failures they stand in for, one question never answered with another's, a hold that
ends at its length after the answer was read, a bound on what is kept, and what ``/readyz`` and ``/metrics`` read."""

from __future__ import annotations

import pytest

from adapter.errors import (
    AdapterError,
    AnswerTooLarge,
    BadAnswer,
    BadRequest,
    KubernetesError,
    NoRoomForAnswer,
    NotConfigured,
    NotFound,
    PrometheusError,
    QueryError,
)
from adapter.provider.held_answers import HeldAnswers
from adapter.self_metrics import AdapterMetrics

DOWN = PrometheusError("Prometheus /api/v1/query at http://prometheus:9090 unreachable: connection refused")


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def held(hold: float = 60.0, max_bytes: int = 1000) -> tuple[HeldAnswers[str, list[str]], Clock, AdapterMetrics]:
    clock, metrics = Clock(), AdapterMetrics()
    answers: HeldAnswers[str, list[str]] = HeldAnswers("external", hold, metrics, len, clock, max_bytes)
    return answers, clock, metrics


@pytest.mark.parametrize(
    ("error", "is_held"),
    [
        (DOWN, True),  # unreachable, a timeout, an error answer (5xx)
        (BadAnswer("a proxy's page", "the answer is not JSON"), True),
        (NoRoomForAnswer("no room before the deadline"), True),
        (QueryError("Prometheus refused the query"), False),  # the rule is wrong: another try meets it again
        (AnswerTooLarge("over the limit", "larger than 32Mi"), False),  # the operator has to act
        (KubernetesError("LIST pods failed"), False),  # not Prometheus
        (NotConfigured("labelSelector needs the Kubernetes API"), False),
        (BadRequest("bad selector"), False),  # a client's mistake
        (NotFound("no such metric"), False),
    ],
)
def test_only_prometheus_failing_now_is_held_through(error: AdapterError, is_held: bool) -> None:
    answers, _, _ = held()
    answers.keep("q", ["1"])
    found = answers.instead_of("q", error)
    assert (found is not None) is is_held
    if found is not None:
        assert found.answer == ["1"]


def test_a_question_is_answered_with_its_own_answer_only() -> None:
    answers, _, _ = held()
    answers.keep("ml app=trainer", ["1"])
    answers.keep("serving app=trainer", ["2"])
    assert answers.instead_of("ml app=other", DOWN) is None
    assert answers.instead_of("ml app=trainer", DOWN).answer == ["1"]  # type: ignore[union-attr]
    assert answers.instead_of("serving app=trainer", DOWN).answer == ["2"]  # type: ignore[union-attr]


def test_the_hold_ends_its_length_after_the_answer_was_read_however_long_it_was_served() -> None:
    answers, clock, _ = held(hold=60)
    answers.keep("q", ["1"])
    clock.now += 10
    assert answers.instead_of("q", DOWN) is not None
    clock.now += 49.9
    assert answers.instead_of("q", DOWN) is not None
    clock.now += 0.1  # 60 s after it was read
    assert answers.instead_of("q", DOWN) is None
    answers.keep("q", ["2"])  # Prometheus answers again: the hold starts from this answer
    clock.now += 59
    assert answers.instead_of("q", DOWN).answer == ["2"]  # type: ignore[union-attr]


def test_no_hold_keeps_nothing() -> None:
    answers, _, metrics = held(hold=0)
    answers.keep("q", ["1"])
    assert answers.instead_of("q", DOWN) is None
    assert metrics.registry.get_sample_value("gpuscale_adapter_held_answers_served_total", {"api": "external"}) is None


def test_a_question_whose_latest_answer_is_none_is_never_answered_with_an_older_one() -> None:
    answers, _, _ = held()
    answers.keep("q", ["1"])
    assert answers.instead_of("q", NotFound("the object has no value now")) is None
    assert answers.instead_of("q", DOWN) is None


def test_what_is_kept_is_bounded_by_its_weight() -> None:
    answers, _, _ = held(max_bytes=10)
    answers.keep("big", ["x"] * 11)  # heavier than the bound alone: not kept
    assert answers.instead_of("big", DOWN) is None
    for key in "abcdef":
        answers.keep(key, ["x", "x"])  # 12 in all: the oldest goes
    assert answers.instead_of("a", DOWN) is None
    assert answers.instead_of("f", DOWN) is not None


def test_the_state_counts_the_answers_standing_in_now_and_the_oldest_age() -> None:
    answers, clock, metrics = held(hold=60)
    answers.keep("a", ["1"])
    clock.now += 5
    answers.keep("b", ["2"])
    answers.keep("c", ["3"])
    assert answers.state().held == 0
    clock.now += 10
    answers.instead_of("a", DOWN)
    answers.instead_of("b", DOWN)
    state = answers.state()
    assert (state.held, state.oldest_age, state.error) == (2, 15, str(DOWN))
    answers.keep("a", ["1"])  # answered by Prometheus again
    assert (answers.state().held, answers.state().oldest_age) == (1, 10)
    clock.now += 60  # b's hold is over
    assert (answers.state().held, answers.state().oldest_age) == (0, 0)
    served = metrics.registry.get_sample_value("gpuscale_adapter_held_answers_served_total", {"api": "external"})
    assert served == 2
