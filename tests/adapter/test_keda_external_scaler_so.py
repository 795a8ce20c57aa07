"""KEDA's own e2e sequence for an external scaler, replayed against the adapter's scaler.

Source: kedacore/keda ``tests/scalers/external_scaler_so/external_scaler_so_test.go`` at commit
8b4f083ca8c8c2baf8477e322bd4d16ac4dfa09a (2026-08-20), its wait helper ``WaitForDeploymentReplicaReadyCount``
(``tests/helper/helper.go``: ``iterations`` checks ``intervalSeconds`` apart), and the scaler it deploys,
kedacore/test-tools ``e2e/images/external-scaler/main.go`` at 24f801c10e46d96635a6a1e8c04827d13fa29718 (IsActive:
value > 0; one metric, target ``metricThreshold``, KEDA's default ``AverageValue``).

Their ScaledObject: ``pollingInterval: 5``, ``cooldownPeriod: 10``, ``idleReplicaCount: 0``, ``minReplicaCount: 1``,
``maxReplicaCount: 2``, ``metricThreshold: 10``, on a Deployment created at 0 replicas. Their sequence:

=====================================  ===========  ========================
the scaler's value                     replicas     within
=====================================  ===========  ========================
0 (at creation)                        0            60 checks 1 s apart: 60 s
10 (the threshold)                     1            60 checks 1 s apart: 60 s
20 (twice the threshold)               2            60 checks 2 s apart: 120 s
0                                      0            60 checks 2 s apart: 120 s
=====================================  ===========  ========================

Here the value is a series in a real Prometheus (the adapter's external rule reads it), the scaler is the adapter's
over TLS with a client certificate, and KEDA is its client as docs/keda.md models it: ``GetMetricSpec`` once to
build the HPA, then every ``pollingInterval`` ``GetMetrics`` and ``IsActive`` on one connection
(``GetMetricsAndActivity``) into KEDA's loop (loadgen/autoscaling/keda.py), and every 15 s the HPA KEDA created
(loadgen/autoscaling/controller.py) reading the value KEDA's metrics server fetches the same way. Time is virtual:
polls and syncs happen at their times on a counted clock, the gRPC calls and Prometheus are real, and a new value
is read a scrape interval after it is set: the series changes only when the virtual clock passes that point (1 s,
the test Prometheus's scrape interval, and 30 s). Pods are Ready as soon as they exist: the limits are checked on
the autoscalers' decisions, not on image pulls. What differs on purpose (docs/keda.md, "Peers' test tables"): the
trigger names the adapter's metric (``metricName``, ``metricType: external``) and takes the threshold
as ``targetValue``, where their scaler serves one fixed metric and reads ``metricThreshold``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from adapter.app import KEDA
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.settings import KedaSettings
from adapter.security.tls import TLSSettings
from harness.adapter.in_process import Adapter, settings_for
from harness.stores.exporter import Exporter, exposition
from harness.stores.prometheus import Prometheus, run_prometheus
from loadgen.autoscaling import HpaController, KedaLoop, ScaledObject, Trigger, simple_observation

pytestmark = pytest.mark.prometheus

MakeAdapter = Callable[..., Awaitable[Adapter]]
NAMESPACE = "external-scaler-so-test-ns"
METRIC = "external_scaler_e2e_test"
THRESHOLD = 10
HPA_SYNC_PERIOD = 15.0  # the HPA controller's --horizontal-pod-autoscaler-sync-period
RULES = f"""
externalRules:
- seriesQuery: '{METRIC}{{namespace!=""}}'
  resources:
    overrides: {{namespace: {{resource: namespace}}}}
  metricsQuery: 'sum(<<.Series>>{{<<.LabelMatchers>>}})'
"""
SCALED_OBJECT = ScaledObject(
    triggers=(),  # from GetMetricSpec, as KEDA builds its HPA
    min_replica_count=1,
    max_replica_count=2,
    polling_interval=5,
    cooldown_period=10,
    idle_replica_count=0,
)


@dataclass
class Value:
    """The scaler's value, as their test's management API sets it: here the series Prometheus scrapes."""

    current: int = 0

    def page(self) -> str:
        return exposition([(METRIC, {"namespace": NAMESPACE}, str(self.current))])


@pytest.fixture(scope="module")
def value() -> Value:
    return Value()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, value: Value) -> Iterator[Prometheus]:
    with Exporter(value.page) as exporter, run_prometheus(tmp_path_factory.mktemp("keda-e2e"),
                                                         [exporter.target]) as prometheus:  # fmt: skip
        prometheus.wait_for(f"{METRIC} == 0")
        yield prometheus


@pytest.fixture
async def stub(store: Prometheus, make_adapter: MakeAdapter, tmp_path: Path) -> AsyncIterator[Any]:
    """The adapter's scaler over TLS, KEDA's channel to it with a client certificate of the client CA."""
    server_ca, client_ca = trustme.CA(), trustme.CA()
    leaf = server_ca.issue_cert("localhost", "127.0.0.1")
    leaf.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    client_ca.cert_pem.write_to_path(str(tmp_path / "keda-ca.crt"))
    (tmp_path / "rules.yaml").write_text(RULES)
    settings = settings_for(
        store.url,
        None,
        config=tmp_path / "rules.yaml",
        cache_ttl=0.0,  # every call reads Prometheus: the virtual clock decides when a value is seen
        insecure_serve_http=False,
        tls=TLSSettings(cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key"),
        keda=KedaSettings(
            "127.0.0.1:0", client_ca_file=tmp_path / "keda-ca.crt", client_allowed_names=("keda-operator",)
        ),
    )
    adapter = await make_adapter(settings)
    keda = client_ca.issue_cert("keda-operator")
    chain = b"".join(blob.bytes() for blob in keda.cert_chain_pems)
    credentials = grpc.ssl_channel_credentials(server_ca.cert_pem.bytes(), keda.private_key_pem.bytes(), chain)
    async with grpc.aio.secure_channel(f"localhost:{adapter.client.app[KEDA].port}", credentials) as channel:
        yield pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]


@dataclass
class Operator:
    """KEDA's operator and metrics server for one ScaledObject, and the HPA it creates, on a virtual clock."""

    stub: Any
    ref: pb.ScaledObjectRef
    keda: KedaLoop
    hpa: HpaController
    now: float = 0.0
    replicas: int = 0  # the Deployment's; its pods Ready at once
    next_poll: float = 0.0
    next_sync: float = 0.0
    history: list[tuple[float, int, str]] = field(default_factory=list)  # (time, replicas, who) at each change

    @classmethod
    async def create(cls, stub: Any, ref: pb.ScaledObjectRef) -> Operator:
        # KEDA's HPA: metric "s0-<name>" (the trigger's index), target targetSizeFloat, AverageValue by default
        spec: pb.GetMetricSpecResponse = await stub.GetMetricSpec(ref)
        triggers = tuple(Trigger(f"s0-{m.metricName}", m.targetSizeFloat) for m in spec.metricSpecs)
        so = dataclasses.replace(SCALED_OBJECT, triggers=triggers)
        return cls(stub, ref, KedaLoop(so), HpaController(so.hpa_spec()))

    @property
    def metric(self) -> str:
        [trigger] = self.keda.scaled_object.triggers
        return trigger.metric

    async def metrics_and_activity(self) -> tuple[float, bool]:
        """GetMetrics, then IsActive; the float unless it is 0 or below, then the integer (KEDA's reading)."""
        request = pb.GetMetricsRequest(scaledObjectRef=self.ref, metricName=self.metric.removeprefix("s0-"))
        answer: pb.GetMetricsResponse = await self.stub.GetMetrics(request)
        [value] = answer.metricValues
        active: pb.IsActiveResponse = await self.stub.IsActive(self.ref)
        return (value.metricValueFloat if value.metricValueFloat > 0 else float(value.metricValue)), active.result

    @property
    def next_event(self) -> float:
        return min(self.next_poll, self.next_sync)

    async def tick(self) -> None:
        """The next poll or sync, or both (KEDA's poll first when both are due, as in keda_replica_series)."""
        self.now = self.next_event
        if self.now == self.next_poll:
            value, active = await self.metrics_and_activity()
            self._record(self.keda.poll(self.now, self.replicas, {self.metric: value}, active).replicas, "keda")
            self.next_poll += self.keda.scaled_object.polling_interval
        if self.now == self.next_sync:
            value, _ = await self.metrics_and_activity()
            observation = simple_observation(self.replicas, {self.metric: value})
            self._record(self.hpa.sync(self.now, observation).replicas, "hpa")
            self.next_sync += HPA_SYNC_PERIOD

    def _record(self, replicas: int, who: str) -> None:
        if replicas != self.replicas:
            self.history.append((self.now, replicas, who))
        self.replicas = replicas


@dataclass(frozen=True)
class Step:
    value: int | None  # what the test sets (None: nothing, the setup's wait)
    replicas: int
    iterations: int
    interval: int  # WaitForDeploymentReplicaReadyCount(..., target, iterations, intervalSeconds)

    @property
    def limit(self) -> float:
        return float(self.iterations * self.interval)


SEQUENCE = [
    Step(None, 0, 60, 1),  # "replica count should be 0 after 1 minute"
    Step(THRESHOLD, 1, 60, 1),  # "scaling to min replicas": "replica count should be 1 after 1 minute"
    Step(THRESHOLD * 2, 2, 60, 2),  # "scaling to max replicas": "replica count should be 2 after 2 minutes"
    Step(0, 0, 60, 2),  # "scaling to idle replicas": "replica count should be 0 after 2 minutes"
]


async def replay(op: Operator, step: Step, value: Value, store: Prometheus, scrape: float) -> float:
    """The virtual seconds from setting the value until the replicas are the step's; fails past the step's limit.
    The value reaches Prometheus ``scrape`` seconds after it is set."""
    start, seen = op.now, step.value is None
    while not (seen and op.replicas == step.replicas):
        if op.next_event - start > step.limit:
            raise AssertionError(f"{step}: {op.replicas} replicas after {step.limit} s; history {op.history}")
        if step.value is not None and not seen and op.next_event >= start + scrape:
            value.current = step.value
            store.wait_for(f"{METRIC} == {step.value}")
            seen = True
        await op.tick()
    return op.now - start


@pytest.mark.parametrize(
    ("scrape", "moves", "took"),
    [
        # the test's Prometheus scrapes every second
        (1.0, [(35.0, "keda"), (45.0, "hpa"), (60.0, "keda")], [0.0, 5.0, 10.0, 15.0]),
        # a value read 30 s after it is set, as with a 30 s scrape interval
        (30.0, [(60.0, "keda"), (90.0, "hpa"), (130.0, "keda")], [0.0, 30.0, 30.0, 40.0]),
    ],
)
async def test_keda_e2e_external_scaler_sequence(
    stub: Any, value: Value, store: Prometheus, scrape: float, moves: list[tuple[float, str]], took: list[float]
) -> None:
    ref = pb.ScaledObjectRef(
        name="external-scaler-so-test-so",
        namespace=NAMESPACE,
        scalerMetadata={
            "scalerAddress": "gpuscale-adapter.gpuscale.svc:9443",
            "metricName": METRIC,
            "metricType": "external",
            "targetValue": str(THRESHOLD),
        },
    )
    op = await Operator.create(stub, ref)
    assert op.hpa.spec.metrics[0].target == THRESHOLD
    assert (op.hpa.spec.min_replicas, op.hpa.spec.max_replicas) == (1, 2)
    # ours, beyond their first wait (met at once): with the value 0, nothing wakes the Deployment for 30 s
    while op.next_event <= 30:
        await op.tick()
    assert op.history == []
    steps = [await replay(op, step, value, store, scrape) for step in SEQUENCE]
    assert [replicas for _, replicas, _ in op.history] == [1, 2, 0]
    assert all(t <= step.limit for t, step in zip(steps, SEQUENCE, strict=True))
    # who moved each step, and when, in the model's clock: KEDA at its first poll after the value is read; the HPA
    # at its next sync; KEDA again once cooldownPeriod has passed since the last active poll (strictly)
    assert [(at, who) for at, _, who in op.history] == moves
    assert steps == took
