"""``serve``'s arrivals: the rate file, read strictly; request lengths; the Poisson process over a stepped rate."""

from pathlib import Path

import pytest

from loadgen.errors import LoadError
from loadgen.serving.arrivals import Arrivals, TokenRange
from loadgen.serving.rate_file import RateSchedule, parse_rates, read_rates


def test_a_rate_file_is_a_step_function_of_time() -> None:
    schedule = parse_rates("# warm up\n0 2\n\n10 5.5   # the peak\n30 0\n", "rates")
    assert schedule == RateSchedule(((0.0, 2.0), (10.0, 5.5), (30.0, 0.0)))
    assert [schedule.rate_at(t) for t in (0, 9.99, 10, 29, 30, 1e6)] == [2, 2, 5.5, 5.5, 0, 0]
    assert [schedule.next_change(t) for t in (0, 10, 30)] == [10.0, 30.0, None]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "rates: no 'seconds rate' line"),
        ("# only a comment\n\n", "rates: no 'seconds rate' line"),
        ("0 1\n5\n", "rates:2: expected 'seconds rate', got '5'"),
        ("0 1 2\n", "rates:1: expected 'seconds rate', got '0 1 2'"),
        ("0 1\n5 fast\n", "rates:2: rate must be a number, got 'fast'"),
        ("zero 1\n", "rates:1: seconds must be a number, got 'zero'"),
        ("0 -1\n", "rates:1: rate must be 0 or more, got -1"),
        ("0 nan\n", "rates:1: rate must be 0 or more, got nan"),
        ("0 inf\n", "rates:1: rate must be 0 or more, got inf"),
        ("5 1\n", "rates:1: the first step must start at 0 seconds, got 5"),
        ("0 1\n# a comment\n10 2\n10 3\n", "rates:4: seconds must increase from line to line, got 10 after 10"),
        ("0 1\n10 2\n5 3\n", "rates:3: seconds must increase from line to line, got 5 after 10"),
    ],
)
def test_every_error_names_the_line_and_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(LoadError) as caught:
        parse_rates(text, "rates")
    assert str(caught.value) == message


def test_a_rate_file_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match=r"^rate file .*/none cannot be read: No such file or directory$"):
        read_rates(tmp_path / "none")
    (tmp_path / "rates").write_bytes(b"0 1\n\xff\n")
    with pytest.raises(LoadError, match=r"^rate file .*/rates cannot be read: 'utf-8' codec"):
        read_rates(tmp_path / "rates")


@pytest.mark.parametrize(("text", "expected"), [("128", (128, 128)), ("64-256", (64, 256)), (" 7-7 ", (7, 7))])
def test_token_lengths_are_fixed_or_a_range(text: str, expected: tuple[int, int]) -> None:
    assert TokenRange.parse(text) == TokenRange(*expected)


@pytest.mark.parametrize("text", ["0", "-5", "5-2", "a", "1-2-3", "", "1.5"])
def test_bad_token_lengths_say_what_is_valid(text: str) -> None:
    with pytest.raises(ValueError, match=r"^expected (tokens as N or LOW-HIGH|1 <= LOW <= HIGH tokens), got "):
        TokenRange.parse(text)


def test_arrivals_follow_the_rate_steps_and_a_seed_repeats_them() -> None:
    rates = parse_rates("0 0\n10 50\n20 0\n", "rates")
    arrivals = Arrivals(rates, TokenRange(10, 20), TokenRange(5, 5), seed=7)
    first = arrivals.next_time()
    assert first is not None
    assert 10 <= first < 20
    requests = arrivals.due(100.0)
    assert arrivals.next_time() is None  # the rate stays 0 after 20 s
    times = [r.arrival for r in requests]
    assert times == sorted(times)
    assert all(10 <= t < 20 for t in times)
    assert 400 < len(requests) < 600  # 50 per second for 10 s, give or take a Poisson process's spread
    assert [r.id for r in requests] == list(range(len(requests)))
    assert {r.output for r in requests} == {5}
    assert {r.prompt for r in requests} <= set(range(10, 21))
    again = Arrivals(rates, TokenRange(10, 20), TokenRange(5, 5), seed=7).due(100.0)
    assert [(r.arrival, r.prompt) for r in again] == [(r.arrival, r.prompt) for r in requests]


def test_arrivals_are_handed_out_once_up_to_the_time_asked() -> None:
    arrivals = Arrivals(RateSchedule.constant(10), TokenRange(1, 1), TokenRange(1, 1))
    early = arrivals.due(1.0)
    later = arrivals.due(2.0)
    assert all(r.arrival <= 1.0 for r in early)
    assert all(1.0 < r.arrival <= 2.0 for r in later)
    assert arrivals.due(2.0) == []
    next_time = arrivals.next_time()
    assert next_time is not None
    assert next_time > 2.0
    assert Arrivals(RateSchedule.constant(0), TokenRange(1, 1), TokenRange(1, 1)).next_time() is None
