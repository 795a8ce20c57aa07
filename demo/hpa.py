"""The HorizontalPodAutoscaler's replica formula for a Pods metric with an AverageValue target.

desired = ceil(current * average / target), unchanged while average / target is within the tolerance (0.1) of 1,
bounded by minReplicas and maxReplicas. With no values (the metrics API returned no items) the HPA does not scale.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

TOLERANCE = 0.1


def desired_replicas(
    current: int, values: Iterable[float], target: float, min_replicas: int = 1, max_replicas: int = 10
) -> int:
    observed = list(values)
    if not observed:
        return current
    ratio = (sum(observed) / len(observed)) / target
    if abs(ratio - 1.0) <= TOLERANCE:
        return current
    return max(min_replicas, min(max_replicas, math.ceil(current * ratio)))
