"""The wait between retries (common/backoff.py)."""

import pytest

from common.backoff import Backoff


def test_doubles_to_the_cap_and_starts_over_after_a_reset() -> None:
    backoff = Backoff(1.0, 8.0, jitter=lambda: 0.0)
    assert [backoff.next() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    backoff.reset()
    assert backoff.next() == 1.0


def test_a_cap_below_the_first_wait_is_the_only_wait() -> None:
    backoff = Backoff(1.0, 0.05, jitter=lambda: 0.0)
    assert [backoff.next() for _ in range(3)] == [0.05, 0.05, 0.05]


@pytest.mark.parametrize(("jitter", "expected"), [(0.0, 2.0), (0.5, 2.2), (1.0, 2.4)])
def test_jitter_adds_up_to_a_fifth(jitter: float, expected: float) -> None:
    assert Backoff(2.0, 30.0, jitter=lambda: jitter).next() == pytest.approx(expected)
