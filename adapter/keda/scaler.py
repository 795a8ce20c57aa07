"""KEDA's external scaler: gRPC request → ``ScalerQuery`` → the provider (``values.py``) → gRPC answer. No PromQL
and no Prometheus here, as in the HTTP handlers; every error leaves through ``status.py``.

KEDA calls, for each ScaledObject with an ``external`` (polled) or ``external-push`` trigger: ``GetMetricSpec``
once per reconcile (the HPA's target), ``IsActive`` and ``GetMetrics`` every ``pollingInterval``, and for
``external-push`` one ``StreamIsActive`` stream that it keeps open, reopening it with a back-off when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator
from decimal import ROUND_CEILING, Decimal
from typing import TypeAlias

import grpc

from adapter.errors import AdapterError, BadRequest, quoted
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.handlers import Malformed
from adapter.keda.metadata import LARGEST, NAMESPACE, ScalerQuery, parse_metadata
from adapter.keda.questions import Questions
from adapter.keda.status import INTERNAL_MESSAGE, bounded, status_of
from adapter.keda.values import value
from adapter.provider.provider import Provider
from adapter.self_metrics import AdapterMetrics
from common.log_limit import LogLimit, left_out

log = logging.getLogger(__name__)

Context: TypeAlias = "grpc.aio.ServicerContext[object, object]"
_INT64 = (-(2**63), 2**63 - 1)
# one line a minute per method and status code: a client repeating a bad call (a ScaledObject's wrong key every
# polling interval, or malformed protobuf on purpose) must not fill the log; the next line says how many were left out
LOG_EVERY_SECONDS = 60.0


def whole(number: Decimal) -> int:
    """The deprecated int64 fields (``targetSize``, ``metricValue``): the ceiling, within int64.

    KEDA reads the float fields whenever they are above zero and the integers only otherwise; a KEDA older than the
    float fields reads the integers alone. The ceiling never turns a demand or a target above zero into a zero (a
    target of 0 is one the HPA cannot divide by, and a value of 0.4 read as 0 would show no load at all); where the
    integer is read beside a float of zero or below, the ceiling of that float is that float's own rounding up."""
    return min(max(int(number.to_integral_value(ROUND_CEILING)), _INT64[0]), _INT64[1])


def read(ref: pb.ScaledObjectRef) -> tuple[str, ScalerQuery]:
    """The namespace and the query of a ScaledObjectRef; ``BadRequest`` naming the field or key."""
    if not NAMESPACE.fullmatch(ref.namespace):
        raise BadRequest(f"scaledObjectRef.namespace {quoted(ref.namespace)} is not a namespace name")
    return ref.namespace, parse_metadata(ref.scalerMetadata)


class Scaler(pb_grpc.ExternalScalerServicer):
    """``externalscaler.ExternalScaler`` on the provider the HTTP APIs use."""

    def __init__(
        self,
        provider: Provider,
        metrics: AdapterMetrics,
        interval: float,
        max_streams: int,
        max_streams_per_namespace: int,
    ) -> None:
        """``interval``: how often a stream's question is asked again; ``max_streams``: how many streams may be open,
        ``max_streams_per_namespace`` of them asking in one namespace."""
        self.provider = provider
        self.metrics = metrics
        self.interval = interval
        self.max_streams = max_streams
        self.max_streams_per_namespace = max_streams_per_namespace
        self.open_streams = 0
        self.streams_of: Counter[str] = Counter()  # open streams by namespace
        self.questions = Questions(provider, interval)
        self._log_limit = LogLimit(LOG_EVERY_SECONDS)

    def close(self) -> None:
        """End every stream with OK, now and from now on: KEDA hears a clean end and opens its stream again, to
        another replica behind the Service."""
        self.questions.close()

    @contextlib.asynccontextmanager
    async def _call(self, method: str, context: Context, request: object) -> AsyncIterator[None]:
        """Counts the call, and turns any error into its gRPC status (never a traceback to the caller). A
        ``Malformed`` request is answered here: the method's body never sees one."""
        started, code = time.monotonic(), grpc.StatusCode.OK
        try:
            if isinstance(request, Malformed):
                # protobuf's reason names the type, never the bytes; cut all the same
                raise BadRequest(f"the request is not an {request.message} message: {request.reason[:200]}")
            yield
        except (asyncio.CancelledError, GeneratorExit):  # the client went away, or the server is stopping
            code = grpc.StatusCode.CANCELLED
            raise
        except grpc.aio.AbortError:
            code = context.code() or grpc.StatusCode.UNKNOWN
            raise
        except AdapterError as e:
            code, message = status_of(e)
            held = self._log_limit.allow(f"{method} {code.name}")
            if held is not None:
                level = logging.WARNING if code is grpc.StatusCode.UNAVAILABLE else logging.INFO
                log.log(level, "%s: %s%s", method, bounded(str(e)), left_out(held, LOG_EVERY_SECONDS))
            await context.abort(code, message)
        except Exception:
            code = grpc.StatusCode.INTERNAL
            held = self._log_limit.allow(f"{method} {code.name}")
            if held is not None:
                log.exception("%s failed%s", method, left_out(held, LOG_EVERY_SECONDS))
            await context.abort(code, INTERNAL_MESSAGE)
        finally:
            self.metrics.keda_requests.labels(method, code.name).inc()
            if not method.startswith("Stream"):
                self.metrics.keda_request_seconds.labels(method).observe(time.monotonic() - started)

    async def IsActive(self, request: pb.ScaledObjectRef, context: Context) -> pb.IsActiveResponse:
        async with self._call("IsActive", context, request):
            namespace, query = read(request)
            return pb.IsActiveResponse(result=await value(self.provider, namespace, query) > query.activation)

    async def GetMetricSpec(self, request: pb.ScaledObjectRef, context: Context) -> pb.GetMetricSpecResponse:
        async with self._call("GetMetricSpec", context, request):
            _, query = read(request)
            spec = pb.MetricSpec(
                metricName=query.metric, targetSizeFloat=float(query.target), targetSize=whole(query.target)
            )
            return pb.GetMetricSpecResponse(metricSpecs=[spec])

    async def GetMetrics(self, request: pb.GetMetricsRequest, context: Context) -> pb.GetMetricsResponse:
        async with self._call("GetMetrics", context, request):
            namespace, query = read(request.scaledObjectRef)
            # KEDA asks by the name GetMetricSpec gave, its "s<trigger index>-" prefix taken off again, and in the
            # case the HPA asked it in: the HPA lowercases external metrics' names, and KEDA matches them ignoring case
            if request.metricName.casefold() != query.metric.casefold():
                raise BadRequest(
                    f"metricName {quoted(request.metricName)} is not the trigger's scalerMetadata metricName "
                    f"{query.metric!r}"
                )
            # the float is what KEDA reads; the exact sum is a decimal, and a float64 holds it to 16 digits. A sum
            # past what KEDA can hand on in int64 thousandths (or past float64) is that largest value: a demand
            # beyond any target, as it is, rather than an overflow or an infinity KEDA reads as 0
            number = min(max(await value(self.provider, namespace, query), -LARGEST), LARGEST)
            metric = pb.MetricValue(
                metricName=request.metricName, metricValueFloat=float(number), metricValue=whole(number)
            )
            return pb.GetMetricsResponse(metricValues=[metric])

    async def StreamMetricSpec(
        self, request: pb.ScaledObjectRef, context: Context
    ) -> AsyncIterator[pb.GetMetricSpecResponse]:
        # a trigger's target is in its metadata, which only a new ScaledObjectRef changes: nothing to push. KEDA
        # takes UNIMPLEMENTED as "ask GetMetricSpec", as it did before this call existed.
        async with self._call("StreamMetricSpec", context, request):
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "the target is the trigger's targetValue; ask GetMetricSpec"
            )
        yield pb.GetMetricSpecResponse()  # never reached: makes this a stream handler

    async def StreamIsActive(self, request: pb.ScaledObjectRef, context: Context) -> AsyncIterator[pb.IsActiveResponse]:
        """The activity now, then each change of it, its question asked every ``interval`` (once for every stream
        asking it, ``questions.py``); until the client goes (gRPC cancels this generator where it waits) or the
        server stops.

        An error before the first answer ends the stream with its status (a bad key, a metric that does not exist,
        Prometheus down), since KEDA reports that and tries again. Once the first answer is sent, errors are logged
        when they begin and end and the stream stays open, sending nothing: KEDA keeps the activity it has, hears
        the same error from its polled IsActive, and the stream wakes the workload as soon as values return,
        instead of after KEDA's back-off (up to a minute) to reopen a stream."""
        async with self._call("StreamIsActive", context, request):
            namespace, query = read(request)
            if self.open_streams >= self.max_streams:
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{self.open_streams} StreamIsActive streams are open, the most --keda-max-streams allows",
                )
            # a share for each namespace: whoever may create ScaledObjects in one cannot take every place
            if self.streams_of[namespace] >= self.max_streams_per_namespace:
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{self.streams_of[namespace]} StreamIsActive streams of namespace {namespace} are open, the "
                    "most --keda-max-streams-per-namespace allows",
                )
            self.open_streams += 1
            self.streams_of[namespace] += 1
            self.metrics.keda_streams.inc()
            try:
                async with contextlib.aclosing(self._activity(namespace, query)) as activity:
                    async for active in activity:
                        self.metrics.keda_stream_updates.inc()
                        yield pb.IsActiveResponse(result=active)
            finally:
                self.open_streams -= 1
                self.streams_of[namespace] -= 1
                if not self.streams_of[namespace]:
                    del self.streams_of[namespace]
                self.metrics.keda_streams.dec()

    async def _activity(self, namespace: str, query: ScalerQuery) -> AsyncGenerator[bool, None]:
        last: bool | None = None
        seen = 0
        with self.questions.asking(namespace, query) as question:
            while (news := await question.after(seen)) is not None:  # None: the server stops, the stream ends OK
                outcome, seen = news
                if isinstance(outcome, Exception):
                    if last is None or not isinstance(outcome, AdapterError):
                        # one error object for every stream of the question: each raise starts its own traceback,
                        # rather than adding its frames to those of the streams that raised it before
                        raise outcome.with_traceback(None)
                    continue  # the question logs when errors begin and end
                active = outcome > query.activation
                if active != last:
                    last = active
                    yield active
