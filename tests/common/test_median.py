"""common/median.py gives what statistics.median gives, whose import the collector avoids."""

from __future__ import annotations

import statistics

from hypothesis import given
from hypothesis import strategies as st

from common.median import median


@given(st.lists(st.integers(min_value=-(10**12), max_value=10**12), min_size=1, max_size=50))
def test_the_median_of_integers_is_statistics_median(values: list[int]) -> None:
    assert median(values) == statistics.median(values)


def test_an_even_count_is_the_mean_of_the_two_middle_values() -> None:
    assert median([4, 1, 3, 2]) == 2.5
    assert median([7]) == 7
