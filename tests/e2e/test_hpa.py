import pytest

from demo.hpa import desired_replicas


@pytest.mark.parametrize(
    ("current", "values", "desired"),
    [
        (3, [95, 95, 95], 5),  # ceil(3 x 95/70) = ceil(4.07)
        (3, [75, 70, 72], 3),  # within the 10 % tolerance
        (3, [63, 63, 63], 3),  # 0.9 exactly: still within
        (4, [20, 20, 20, 20], 2),  # ceil(4 x 20/70) = ceil(1.14)
        (2, [0, 0], 1),  # never below minReplicas
        (8, [100] * 8, 10),  # never above maxReplicas
        (3, [], 3),  # no items: no scaling
    ],
)
def test_the_hpa_formula(current: int, values: list[float], desired: int) -> None:
    assert desired_replicas(current, values, target=70) == desired
