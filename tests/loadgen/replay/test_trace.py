"""Reading a trace in the Azure LLM inference trace format, and scaling its rate, on traces small enough to check by
hand."""

from pathlib import Path

import pytest

from loadgen.errors import LoadError
from loadgen.replay.trace import Arrival, parse_trace, read_trace, scale_rate

TRACE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:46.1805900,879,55
"""


def test_rows_become_arrivals_in_time_order_from_the_first() -> None:
    arrivals = parse_trace(TRACE.splitlines(), "t.csv")
    assert arrivals[:2] == [Arrival(0.0, 879, 55), Arrival(0.5, 374, 44)]
    assert (arrivals[2].prompt, arrivals[2].output) == (396, 109)
    assert abs(arrivals[2].at - 4.814579) < 1e-9  # 50.995169 - 46.180590: the seventh digit is dropped


def test_the_columns_may_come_in_any_order_and_blank_lines_are_skipped() -> None:
    text = "GeneratedTokens,TIMESTAMP,ContextTokens\n\n7,2023-11-16 18:00:00,3\n9,2023-11-16 18:00:02.25,4\n"
    assert parse_trace(text.splitlines(), "t.csv") == [Arrival(0.0, 3, 7), Arrival(2.25, 4, 9)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "t.csv: empty; expected the header TIMESTAMP,ContextTokens,GeneratedTokens"),
        ("TIMESTAMP,Context,GeneratedTokens\n", "t.csv:1: the header has no ContextTokens"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "t.csv: no request after the header"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1\n", "t.csv:2: expected 3 fields, got 2"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1,2\nyesterday,1,2\n",
         "t.csv:3: TIMESTAMP must be a date and time"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1.5,2\n",
         "t.csv:2: ContextTokens must be a whole number of tokens, got '1.5'"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1,-2\n",
         "t.csv:2: GeneratedTokens must be from 0 to 10,000,000 tokens, got -2"),
    ],
)  # fmt: skip
def test_a_bad_trace_is_refused_naming_the_line_and_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(LoadError) as e:
        parse_trace(text.splitlines(keepends=True), "t.csv")
    assert str(e.value).startswith(message)


def test_a_missing_or_binary_file_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match=r"cannot read the trace .*nope\.csv: No such file"):
        read_trace(tmp_path / "nope.csv")
    (tmp_path / "b.csv").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(LoadError, match=r"b\.csv: not UTF-8 text"):
        read_trace(tmp_path / "b.csv")


def ten_requests() -> list[Arrival]:
    return [Arrival(float(t), 100 + t, 10 + t) for t in range(0, 20, 2)]


def test_a_whole_scale_keeps_every_request_and_puts_its_copies_before_the_next_one() -> None:
    arrivals = ten_requests()
    scaled = scale_rate(arrivals, 3, seed=1)
    assert len(scaled) == 30
    assert all(a in scaled for a in arrivals)
    for t in range(0, 18, 2):  # every 2 s slot holds its request and two copies; the last has no next one
        assert sum(t <= a.at < t + 2 for a in scaled) == 3
    assert sum(a.at == 18 for a in scaled) == 3
    sizes = {(a.prompt, a.output) for a in arrivals}
    assert {(a.prompt, a.output) for a in scaled} <= sizes  # copies take sizes the trace has


def test_a_fractional_scale_adds_copies_with_its_probability_and_is_the_same_for_the_same_seed() -> None:
    arrivals = [Arrival(t / 10, 1, 1) for t in range(10_000)]
    scaled = scale_rate(arrivals, 1.5, seed=7)
    assert 14_500 < len(scaled) < 15_500  # 10,000 + Binomial(10,000, 0.5): 5 standard deviations is 250
    assert scaled == scale_rate(arrivals, 1.5, seed=7)
    assert scaled != scale_rate(arrivals, 1.5, seed=8)


def test_a_scale_below_one_keeps_a_share_of_the_requests() -> None:
    arrivals = [Arrival(t / 10, 1, 1) for t in range(10_000)]
    kept = scale_rate(arrivals, 0.25, seed=3)
    assert 2_250 < len(kept) < 2_750
    assert set(kept) <= set(arrivals)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), float("nan")])
def test_a_scale_that_is_not_a_positive_number_is_refused(scale: float) -> None:
    with pytest.raises(LoadError, match="--rate-scale must be a positive number"):
        scale_rate(ten_requests(), scale)
