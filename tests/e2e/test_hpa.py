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


# Worked examples of the Kubernetes documentation ("Horizontal Pod Autoscaling", algorithm details, and the
# HorizontalPodAutoscaler walkthrough), independent of the cases above.
@pytest.mark.parametrize(
    ("current", "value", "target", "desired"),
    [
        (4, 0.200, 0.100, 8),  # "200m ... desired value is 100m, the number of replicas will be doubled"
        (4, 0.050, 0.100, 2),  # "50m, you'll halve the number of replicas"
        (4, 0.105, 0.100, 4),  # "sufficiently close to 1.0 (within ... 0.1 by default)": no change
        (1, 305.0, 50.0, 7),  # the walkthrough: php-apache at 305% of a 50% CPU target goes from 1 to 7 replicas
    ],
)
def test_the_formula_against_the_kubernetes_documentation(
    current: int, value: float, target: float, desired: int
) -> None:
    assert desired_replicas(current, [value] * current, target=target) == desired
