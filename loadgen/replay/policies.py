"""The autoscaling policies a replay compares, each as the project that recommends it documents it.

A ``Policy`` is one of three kinds: an HPA (``HpaSpec``), a KEDA ScaledObject (``ScaledObject``) or a fixed replica
count. Its metrics are the names the replay's metric pipeline serves: the adapter's built-in names
(``PODS_METRICS``, ``EXTERNAL_METRICS``) and, for what a peer reads that the adapter does not serve yet,
``EXTRA_METRICS``, each defined there. A KEDA trigger on a Pods name reads the sum over the workload's pods (the
adapter's scaler with ``metricType: pods``); on an External name, the namespace's value.

``POLICIES`` holds the peers' documented settings and gpuscale's first proposal; docs/replay-policies.md cites
each number's source and says what the replay cannot model. The documented ``maxReplicas`` are the sizes of the
tutorials' clusters (2 to 10 GPUs), not a recommendation, so every policy here gets ``DEFAULT_MAX_REPLICAS`` and
``with_max_replicas`` sets another cap. ``manifest`` writes a policy as the object to apply.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

import yaml

from loadgen.autoscaling import Behavior, HpaSpec, MetricSpec, ScaledObject, ScalingPolicy, ScalingRules, Trigger

# Served per pod by the adapter's custom metrics API (built-in rules, adapter/default-rules.yaml).
PODS_METRICS: dict[str, str] = {
    "gpu_utilization": "the pod's GPU utilization, percent 0-100 (DCGM_FI_DEV_GPU_UTIL)",
    "inference_requests_waiting": "requests queued in the pod's engine, not yet running",
    "inference_requests_running": "requests in the pod's running batch",
    "inference_kv_cache_usage": "percent 0-100 of the engine's KV cache in use: the engine's 0-1 ratio x 100",
    "inference_time_to_first_token_seconds": "mean time to first token over the last minute",
}
# Served for the namespace by the adapter's external metrics API (built-in rules).
EXTERNAL_METRICS: dict[str, str] = {
    "inference_demand": "requests waiting in the namespace: the gateway's queue plus the engines' waiting",
    "inference_request_rate": "requests arriving per second over the last minute, counted at the front door",
    "inference_capacity_demand": (
        "percent of the ready engines' KV cache the arrivals need: their mean KV use times arrivals / what the "
        "engines there now finish, both a second over the last minute, when above 1"
    ),
    "inference_activity": "1 while requests arrived in the last minute, are held at the gateway or wait or run, else 0",
    "inference_capacity_forecast": (
        "100 x the most replicas' worth of KV cache that what arrived needed yesterday, from this time to 5 minutes "
        "after (a recorded inference_capacity_demand x engines); 0 with no record yesterday"
    ),
    # the endpoint picker's own series; the replay's gateway writes none, so ServedMetrics models them
    "inference_gateway_requests_running": (
        "requests the gateway has sent to an engine that have not finished, summed over the namespace (the "
        "engines' waiting plus running): what the endpoint picker's llm_d_epp_request_running counts"
    ),
    "inference_pool_saturation": (
        "the endpoint picker's pool saturation (llm_d_epp_flow_control_pool_saturation, utilization detector): "
        "over the ready replicas, the highest of max(waiting / 5, KV cache ratio (0-1) / 0.8); 1.0 with no ready "
        "replica"
    ),
}
# What peers read that the adapter does not serve (yet): the replay's pipeline serves these as External metrics
# with these definitions, scraped like the rest.
EXTRA_METRICS: dict[str, str] = {
    "inference_request_activity": (
        "1 while the front door counted at least one request over the last minute, else 0: production-stack's "
        "keepalive query sum(rate(vllm:num_incoming_requests_total[1m]) > bool 0) with its one router series"
    ),
}
# The adapter's KEDA scaler as manifests/examples/keda and docs/keda.md ship it.
SCALER_ADDRESS = "gpuscale-adapter.gpuscale.svc:9443"
TRIGGER_AUTHENTICATION = "gpuscale-adapter"
DEFAULT_MAX_REPLICAS = 64

Kind = Literal["hpa", "keda", "static"]


@dataclass(frozen=True)
class Policy:
    """An autoscaling policy: exactly one of ``hpa``, ``keda`` and ``static_replicas`` is set."""

    name: str
    recommended_by: str
    source: str
    hpa: HpaSpec | None = None
    keda: ScaledObject | None = None
    static_replicas: int | None = None

    def __post_init__(self) -> None:
        for key in ("name", "recommended_by", "source"):
            if not getattr(self, key).strip():
                raise ValueError(f"policy {self.name!r}: {key} is empty")
        kinds = [k for k, v in (("hpa", self.hpa), ("keda", self.keda), ("static_replicas", self.static_replicas))
                 if v is not None]  # fmt: skip
        if len(kinds) != 1:
            raise ValueError(f"policy {self.name}: set exactly one of hpa, keda and static_replicas, not {kinds}")
        if self.static_replicas is not None and self.static_replicas < 1:
            raise ValueError(f"policy {self.name}: static_replicas must be 1 or more, not {self.static_replicas}")
        if self.hpa is not None:
            _check_hpa(self.name, self.hpa)
        if self.keda is not None:
            _check_keda(self.name, self.keda)

    @property
    def kind(self) -> Kind:
        return "hpa" if self.hpa is not None else "keda" if self.keda is not None else "static"

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metric names the policy reads, in its order."""
        if self.hpa is not None:
            return tuple(m.name for m in self.hpa.metrics)
        if self.keda is not None:
            return tuple(t.metric for t in self.keda.triggers)
        return ()


def _external(name: str) -> bool:
    return name in EXTERNAL_METRICS or name in EXTRA_METRICS


def _check_hpa(policy: str, spec: HpaSpec) -> None:
    for m in spec.metrics:
        if m.source == "Object":
            raise ValueError(f"policy {policy}: metric {m.name}: Object metrics are not served to the replay")
        if m.source == "Pods" and m.name not in PODS_METRICS:
            raise ValueError(f"policy {policy}: {m.name} is not a Pods metric the pipeline serves")
        if m.source == "External" and not _external(m.name):
            raise ValueError(f"policy {policy}: {m.name} is not an External metric the pipeline serves")
    # the API server's rule (pkg/apis/autoscaling/validation): minReplicas 0 needs an Object or External metric
    if spec.min_replicas == 0 and not any(m.source == "External" for m in spec.metrics):
        raise ValueError(f"policy {policy}: minReplicas 0 needs an External metric, which has a value at 0 pods")


def _check_keda(policy: str, so: ScaledObject) -> None:
    if not so.triggers:
        raise ValueError(f"policy {policy}: a ScaledObject needs at least one trigger")
    for t in so.triggers:
        if t.metric not in PODS_METRICS and not _external(t.metric):
            raise ValueError(f"policy {policy}: trigger {t.metric} is no metric the pipeline serves")
        if t.metric in PODS_METRICS and t.metric_type != "AverageValue":
            # docs/keda.md, "The numbers": Value would count the pods' sum once per replica
            raise ValueError(f"policy {policy}: trigger {t.metric} reads a sum over pods: take AverageValue")
        if t.target <= 0:
            raise ValueError(f"policy {policy}: trigger {t.metric}: the target must be above 0")
    if so.min_replica_count == 0 and not any(_external(t.metric) for t in so.triggers):
        # at zero replicas a trigger on the pods' own metrics has no value (docs/keda.md, "Activity")
        raise ValueError(f"policy {policy}: minReplicaCount 0 needs a trigger on an External metric to wake it")
    if not 0 <= so.min_replica_count <= so.max_replica_count or so.max_replica_count < 1:
        raise ValueError(f"policy {policy}: need 0 <= minReplicaCount <= maxReplicaCount and maxReplicaCount >= 1")
    if so.idle_replica_count is not None and not 0 <= so.idle_replica_count < so.min_replica_count:
        # KEDA's webhook: idleReplicaCount must be lower than minReplicaCount
        raise ValueError(f"policy {policy}: idleReplicaCount must be from 0 to below minReplicaCount")
    for key in ("polling_interval", "cooldown_period", "initial_cooldown_period"):
        value = getattr(so, key)
        if value != int(value) or value < (1 if key == "polling_interval" else 0):
            least = 1 if key == "polling_interval" else 0
            raise ValueError(f"policy {policy}: {key} must be whole seconds, {least} or more, not {value}")


def static_policy(replicas: int) -> Policy:
    """Peak provisioning: ``replicas`` all the time (the replay computes it from the trace's peak)."""
    return Policy(
        name="static-peak",
        recommended_by="capacity planning without an autoscaler",
        source="a fixed replica count sized for the trace's peak (docs/replay-policies.md)",
        static_replicas=replicas,
    )


def with_max_replicas(policy: Policy, max_replicas: int) -> Policy:
    """The policy with another replica cap (a static policy is returned as it is)."""
    if policy.hpa is not None:
        return dataclasses.replace(policy, hpa=dataclasses.replace(policy.hpa, max_replicas=max_replicas))
    if policy.keda is not None:
        return dataclasses.replace(policy, keda=dataclasses.replace(policy.keda, max_replica_count=max_replicas))
    return policy


def with_min_replicas(policy: Policy, min_replicas: int) -> Policy:
    """The policy holding at least ``min_replicas`` (a floor: minReplicas, minReplicaCount), named so in its name; a
    static policy, or one whose floor is already that high, is returned as it is."""
    if policy.hpa is not None and policy.hpa.min_replicas < min_replicas:
        hpa = dataclasses.replace(policy.hpa, min_replicas=min_replicas)
        return dataclasses.replace(policy, name=f"{policy.name}, min {min_replicas}", hpa=hpa)
    if policy.keda is not None and policy.keda.min_replica_count < min_replicas:
        idle = policy.keda.idle_replica_count
        if idle is not None and idle >= min_replicas:
            idle = None  # KEDA takes an idle count only below minReplicaCount
        keda = dataclasses.replace(policy.keda, min_replica_count=min_replicas, idle_replica_count=idle)
        return dataclasses.replace(policy, name=f"{policy.name}, min {min_replicas}", keda=keda)
    return policy


def _percent_per_15s(window: int) -> ScalingRules:
    return ScalingRules(stabilization_window_seconds=window, policies=(ScalingPolicy("Percent", 100, 15),))


SEED = Policy(
    name="seed-gpu-utilization",
    recommended_by="the seed (this project's first example)",
    source="manifests/examples/gpu-hpa/hpa.yaml",
    hpa=HpaSpec(
        metrics=(MetricSpec("gpu_utilization", "Pods", 70),),
        min_replicas=1,
        max_replicas=DEFAULT_MAX_REPLICAS,
        behavior=Behavior(scale_down=ScalingRules(stabilization_window_seconds=300)),
    ),
)
PRODUCTION_STACK = Policy(
    name="production-stack",
    recommended_by="vLLM production-stack",
    source="vllm-project/production-stack tutorials/20-keda-autoscaling.md §7 (scale to zero), 41b93c42 (2026-04-13)",
    keda=ScaledObject(
        triggers=(Trigger("inference_requests_waiting", 5), Trigger("inference_request_activity", 1)),
        min_replica_count=0,
        max_replica_count=DEFAULT_MAX_REPLICAS,
        polling_interval=15,
        cooldown_period=360,
    ),
)
LLM_D_WVA = Policy(
    name="llm-d-wva",
    recommended_by="llm-d (workload-variant-autoscaler, before KEDA + EPP)",
    source="llm-d-incubation/workload-variant-autoscaler docs/saturation-scaling-config.md 93aa06c4; "
    "llm-d/llm-d guides/workload-autoscaling/optimized-baseline-autoscaling/hpa.yaml 739e6a61",
    hpa=HpaSpec(
        metrics=(
            MetricSpec("inference_kv_cache_usage", "Pods", 80),
            MetricSpec("inference_requests_waiting", "Pods", 5),
        ),
        min_replicas=1,
        max_replicas=DEFAULT_MAX_REPLICAS,
        behavior=Behavior(scale_up=_percent_per_15s(120), scale_down=_percent_per_15s(120)),
    ),
)
_LLM_D_OVERLAYS = "llm-d/llm-d guides/workload-autoscaling/keda-epp/optimized-baseline/overlays/k8s"


def _llm_d_keda_epp(name: str, signal: str, trigger: Trigger, overlay: str) -> Policy:
    """llm-d's KEDA + EPP overlays: one signal beside the shared trigger on running requests, 16 per replica."""
    return Policy(
        name=name,
        recommended_by=f"llm-d (KEDA on the endpoint picker's {signal})",
        source=f"{_LLM_D_OVERLAYS}/{overlay}",
        keda=ScaledObject(
            triggers=(trigger, Trigger("inference_gateway_requests_running", 16)),
            min_replica_count=1,
            max_replica_count=DEFAULT_MAX_REPLICAS,
            polling_interval=15,
            cooldown_period=300,
            behavior=Behavior(scale_up=_percent_per_15s(300), scale_down=_percent_per_15s(300)),
        ),
    )


LLM_D_EPP_SATURATION = _llm_d_keda_epp(
    "llm-d-epp-saturation",
    "pool saturation",
    Trigger("inference_pool_saturation", 0.7),
    "saturation/scaledobject.yaml 321a7e8c",
)
LLM_D_EPP_QUEUE = _llm_d_keda_epp(
    "llm-d-epp-queue",
    "queue, its default signal",
    Trigger("inference_demand", 1),
    "queue/scaledobject.yaml 057abb4a",
)
KSERVE = Policy(
    name="kserve",
    recommended_by="KServe (InferenceService with autoscalerClass keda)",
    source="kserve/website docs/model-serving/generative-inference/autoscaling/autoscaling.md 54acd462 "
    "(2025-09-13); kserve/kserve pkg/controller/v1beta1/inferenceservice/reconcilers/keda/keda_reconciler.go 00ad1e9f",
    keda=ScaledObject(
        triggers=(Trigger("inference_requests_running", 2),),
        min_replica_count=1,
        max_replica_count=DEFAULT_MAX_REPLICAS,
    ),
)
# What the replay's first results revised (docs/replay-policies.md): kept to compare, not replayed by default.
GPUSCALE_FIRST = Policy(
    name="gpuscale-first-proposal",
    recommended_by="gpuscale (first proposal)",
    source="manifests/examples/inference-hpa/hpa.yaml, with a KV cache term at llm-d's 0.8",
    hpa=HpaSpec(
        metrics=(MetricSpec("inference_demand", "External", 5), MetricSpec("inference_kv_cache_usage", "Pods", 80)),
        min_replicas=0,
        max_replicas=DEFAULT_MAX_REPLICAS,
        behavior=Behavior(scale_down=ScalingRules(stabilization_window_seconds=600)),
    ),
)
# Scaling on what arrives (docs/adapter.md): the KV cache the arrivals need at llm-d's 80 %, and the activity
# to wake from zero and stay up while anything is in flight.
GPUSCALE = Policy(
    name="gpuscale",
    recommended_by="gpuscale",
    source='manifests/examples/inference-hpa/hpa.yaml; docs/adapter.md, "Scaling on what arrives"',
    hpa=HpaSpec(
        metrics=(
            MetricSpec("inference_capacity_demand", "External", 80, "Value"),
            MetricSpec("inference_activity", "External", 1),
        ),
        min_replicas=0,
        max_replicas=DEFAULT_MAX_REPLICAS,
        behavior=Behavior(
            scale_up=ScalingRules(stabilization_window_seconds=0, policies=(ScalingPolicy("Percent", 1000, 15),)),
            scale_down=ScalingRules(stabilization_window_seconds=600),
        ),
    ),
)
# The same with a floor from yesterday: the capacity the same time yesterday needed, from now to 5 minutes ahead.
assert GPUSCALE.hpa is not None
GPUSCALE_FORECAST = dataclasses.replace(
    GPUSCALE,
    name="gpuscale-forecast",
    recommended_by="gpuscale, for traffic that repeats daily",
    source='docs/adapter.md, "A forecast floor"',
    hpa=dataclasses.replace(
        GPUSCALE.hpa, metrics=(*GPUSCALE.hpa.metrics, MetricSpec("inference_capacity_forecast", "External", 80))
    ),
)
POLICIES: tuple[Policy, ...] = (SEED, PRODUCTION_STACK, LLM_D_WVA, LLM_D_EPP_SATURATION, LLM_D_EPP_QUEUE, KSERVE,
                                GPUSCALE)  # fmt: skip
# Replayed when named in --policies.
OTHER_POLICIES: tuple[Policy, ...] = (GPUSCALE_FIRST, GPUSCALE_FORECAST)
FORECAST = "inference_capacity_forecast"  # a policy reading it is replayed twice: once for yesterday's record


def without_forecast(policy: Policy) -> Policy:
    """The policy without its forecast metric: what ran yesterday, recording what the forecast reads."""
    assert policy.hpa is not None, "only an HPA policy reads the forecast"
    metrics = tuple(m for m in policy.hpa.metrics if m.name != FORECAST)
    return dataclasses.replace(policy, hpa=dataclasses.replace(policy.hpa, metrics=metrics))


def quantity(value: float) -> str:
    """A number as a plain decimal string (``80``, ``0.7``): a Kubernetes quantity and a KEDA ``targetValue``."""
    return format(Decimal(repr(float(value))).normalize(), "f")


def _rules(rules: ScalingRules) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rules.stabilization_window_seconds is not None:
        out["stabilizationWindowSeconds"] = rules.stabilization_window_seconds
    if rules.select_policy is not None:
        out["selectPolicy"] = rules.select_policy
    if rules.policies is not None:
        out["policies"] = [
            {"type": p.type, "value": p.value, "periodSeconds": p.period_seconds} for p in rules.policies
        ]
    if rules.tolerance is not None:
        out["tolerance"] = quantity(rules.tolerance)
    return out


def _behavior(behavior: Behavior) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if behavior.scale_up is not None:
        out["scaleUp"] = _rules(behavior.scale_up)
    if behavior.scale_down is not None:
        out["scaleDown"] = _rules(behavior.scale_down)
    return out


def _hpa_metric(m: MetricSpec) -> dict[str, Any]:
    target = {"type": m.target_type, "averageValue" if m.target_type == "AverageValue" else "value": quantity(m.target)}
    key = "pods" if m.source == "Pods" else "external"
    return {"type": m.source, key: {"metric": {"name": m.name}, "target": target}}


def _hpa(spec: HpaSpec, namespace: str, deployment: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
        "minReplicas": spec.min_replicas,
        "maxReplicas": spec.max_replicas,
        "metrics": [_hpa_metric(m) for m in spec.metrics],
    }
    if spec.behavior is not None:
        body["behavior"] = _behavior(spec.behavior)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": deployment, "namespace": namespace},
        "spec": body,
    }


def _trigger(t: Trigger, label_selector: str) -> dict[str, Any]:
    metadata = {"scalerAddress": SCALER_ADDRESS, "metricName": t.metric}
    if t.metric in PODS_METRICS:
        metadata |= {"metricType": "pods", "labelSelector": label_selector}
    else:
        metadata["metricType"] = "external"
    metadata |= {"targetValue": quantity(t.target), "activationValue": quantity(t.activation_threshold)}
    return {
        "type": "external",
        "metricType": t.metric_type,
        "metadata": metadata,
        "authenticationRef": {"kind": "ClusterTriggerAuthentication", "name": TRIGGER_AUTHENTICATION},
    }


def _scaled_object(so: ScaledObject, namespace: str, deployment: str, label_selector: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
        "minReplicaCount": so.min_replica_count,
        "maxReplicaCount": so.max_replica_count,
        "pollingInterval": int(so.polling_interval),
        "cooldownPeriod": int(so.cooldown_period),
    }
    if so.initial_cooldown_period:
        spec["initialCooldownPeriod"] = int(so.initial_cooldown_period)
    if so.idle_replica_count is not None:
        spec["idleReplicaCount"] = so.idle_replica_count
    if so.behavior is not None:
        spec["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": _behavior(so.behavior)}}
    spec["triggers"] = [_trigger(t, label_selector) for t in so.triggers]
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": deployment, "namespace": namespace},
        "spec": spec,
    }


def manifest(policy: Policy, namespace: str, deployment: str, label_selector: str | None = None) -> str:
    """The policy as the object to apply for Deployment ``deployment``: an ``autoscaling/v2`` HPA, or a KEDA
    ScaledObject whose triggers ask the adapter's scaler (``label_selector``, default ``app=<deployment>``, picks
    the pods a trigger on a Pods metric sums). A static policy is an HPA whose bounds are both its count."""
    if policy.keda is not None:
        obj = _scaled_object(policy.keda, namespace, deployment, label_selector or f"app={deployment}")
    else:
        hpa = policy.hpa
        if hpa is None:
            count = policy.static_replicas or 1
            # any served metric does: with minReplicas = maxReplicas the bounds decide
            hpa = HpaSpec((MetricSpec("inference_demand", "External", 5),), max_replicas=count, min_replicas=count)
        obj = _hpa(hpa, namespace, deployment)
    extra = [name for name in policy.metrics if name in EXTRA_METRICS]
    head = [f"# {policy.name}: recommended by {policy.recommended_by}", f"# source: {policy.source}"]
    if extra:
        head.append(f"# needs metrics the adapter does not serve yet: {', '.join(extra)} (docs/replay-policies.md)")
    return "\n".join(head) + "\n" + yaml.safe_dump(obj, sort_keys=False)
