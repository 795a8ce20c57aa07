from common.log_limit import LogLimit, left_out


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_kind_per_interval_then_the_count_left_out() -> None:
    clock = Clock()
    limit = LogLimit(60, clock)
    assert limit.allow("NoSocket") == 0
    assert [limit.allow("NoSocket") for _ in range(5)] == [None] * 5
    assert limit.allow("Unavailable") == 0  # another kind is not held back by the first
    clock.now = 59.9
    assert limit.allow("NoSocket") is None
    clock.now = 60.0
    assert limit.allow("NoSocket") == 6
    assert limit.allow("NoSocket") is None


def test_after_clearing_the_next_occurrence_is_logged_at_once() -> None:
    clock = Clock()
    limit = LogLimit(60, clock)
    assert limit.allow("x") == 0
    assert limit.allow("x") is None
    limit.clear()
    assert limit.allow("x") == 0


def test_the_suffix_says_how_many_were_left_out() -> None:
    assert left_out(0, 60) == ""
    assert left_out(3, 60) == " (3 more like it in the last 60 s not logged)"
