"""KEDA's polling of the external scaler, as bench/scale_bench.py drives it against the simulated cluster.

Each ScaledObject k has one ``external`` trigger on the adapter asking what HPA k of the HTTP load asks: the sum of
``gpu_utilization`` over the pods of its namespace labelled ``app=hpa-k`` (``metricType: pods``). Every
``pollingInterval`` KEDA's operator calls ``GetMetrics``, then ``IsActive``, for each ScaledObject, one after the
other, over one connection for every trigger with the same ``scalerAddress`` (KEDA's ``pkg/scalers/
external_scaler.go``: ``GetMetricsAndActivity``, its client taken from a pool keyed by the address). The ScaledObjects
are spread evenly over the interval, and calls leave on schedule whatever the answers do (open loop), as the HTTP
load's requests do.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import grpc

from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from bench.scale_cluster import FIELDS, Cluster

POLLING_INTERVAL = 30.0  # KEDA's default pollingInterval
METRIC = "gpu_utilization"


def scaled_object(cluster: Cluster, k: int, address: str) -> pb.ScaledObjectRef:
    """The ScaledObjectRef KEDA sends for ScaledObject k: its name, its namespace, and the trigger's metadata."""
    metadata = {
        "scalerAddress": address,
        "metricName": METRIC,
        "metricType": "pods",
        "labelSelector": f"app={cluster.app(k)}",
        "targetValue": "50",
    }
    return pb.ScaledObjectRef(name=f"scaled-{k:04d}", namespace=cluster.namespace(k), scalerMetadata=metadata)


def expected(cluster: Cluster, k: int) -> Decimal:
    """ScaledObject k's value: the GPU utilization of each of HPA k's pods (one GPU each), summed."""
    utilization = FIELDS["DCGM_FI_DEV_GPU_UTIL"]
    return sum((Decimal(utilization(gpu)) for gpu in range(k, cluster.gpus, cluster.hpas)), Decimal(0))


@dataclass
class Polls:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"GetMetrics": [], "IsActive": []})
    codes: Counter[str] = field(default_factory=Counter)  # gRPC status codes of every call
    wrong: int = 0  # answers that are not the pods' sum, or an activity that is not "the sum is above 0"

    @property
    def all(self) -> list[float]:
        return self.latencies["GetMetrics"] + self.latencies["IsActive"]


async def _call(polls: Polls, method: str, call: Any, request: Any) -> Any:
    started = time.perf_counter()
    try:
        answer = await call(request)
    except grpc.aio.AioRpcError as e:
        polls.latencies[method].append(time.perf_counter() - started)
        polls.codes[e.code().name] += 1
        return None
    polls.latencies[method].append(time.perf_counter() - started)
    polls.codes["OK"] += 1
    return answer


async def poll(address: str, cluster: Cluster, seconds: float, period: float = POLLING_INTERVAL) -> Polls:
    """Every ScaledObject's GetMetrics then IsActive once a ``period``, for ``seconds``, on one channel."""
    polls = Polls()
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()
    refs = [scaled_object(cluster, k, address) for k in range(cluster.hpas)]
    sums = [expected(cluster, k) for k in range(cluster.hpas)]

    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]

        async def one(k: int) -> None:
            request = pb.GetMetricsRequest(scaledObjectRef=refs[k], metricName=METRIC)
            metrics = await _call(polls, "GetMetrics", stub.GetMetrics, request)
            if metrics is not None and [Decimal(repr(v.metricValueFloat)) for v in metrics.metricValues] != [sums[k]]:
                polls.wrong += 1
            active = await _call(polls, "IsActive", stub.IsActive, refs[k])
            if active is not None and active.result != (sums[k] > 0):
                polls.wrong += 1

        start = loop.time() + 0.2
        for i in itertools.count():
            at = start + i * period / cluster.hpas
            if at - start >= seconds:
                break
            await asyncio.sleep(max(0.0, at - loop.time()))
            task = asyncio.create_task(one(i % cluster.hpas))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
    return polls
