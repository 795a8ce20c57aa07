"""Prometheus API answers of a chosen size, as a server sends them, for the tests and benchmarks of large answers."""

from __future__ import annotations

import functools
import json


@functools.cache
def vector(series: int) -> bytes:
    """About 240 bytes a series, as DCGM labels them, for pods no request names."""
    result = [
        {
            "metric": {
                "__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": f"node-{i // 8:05d}", "UUID": f"GPU-{i:08x}-0f3c-4b5e",
                "container": "main", "gpu": str(i % 8), "modelName": "NVIDIA H200", "namespace": "ml",
                "pod": f"elsewhere-{i:06d}",
            },
            "value": [1.8e9, str(i % 100)],
        }
        for i in range(series)
    ]  # fmt: skip
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
