"""The policies the replay compares: each peer's settings as its cited source writes them (the numbers below are
copied from those sources, cited beside them), the validation of a policy, and the manifests: valid objects for
Kubernetes 1.28 and 1.37 and KEDA's CRD, questions the adapter's KEDA scaler accepts, and read back, by a parser of
this test's own, into the same numbers."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from adapter.config.rules import default_rules_text, parse_rules
from adapter.keda.metadata import MetricType, parse_metadata
from adapter.naming.resources import BUILT_IN, PODS
from harness.deploy.manifests import MANIFESTS, render
from harness.deploy.validation import K8S_VERSIONS, problems
from loadgen.autoscaling import Behavior, HpaSpec, MetricSpec, ScaledObject, ScalingPolicy, ScalingRules, Trigger
from loadgen.replay import policies
from loadgen.replay.policies import (
    DEFAULT_MAX_REPLICAS,
    EXTERNAL_METRICS,
    EXTRA_METRICS,
    GPUSCALE,
    OTHER_POLICIES,
    PODS_METRICS,
    POLICIES,
    Policy,
    manifest,
    quantity,
    static_policy,
    with_max_replicas,
    with_min_replicas,
)

WAITING = MetricSpec("inference_requests_waiting", "Pods", 5)
DEMAND = MetricSpec("inference_demand", "External", 5)
PER_15S = (ScalingPolicy("Percent", 100, 15),)


def policy(**kinds: Any) -> Policy:
    return Policy("p", "someone", "somewhere", **kinds)


def by_name(name: str) -> Policy:
    (found,) = [p for p in (*POLICIES, *OTHER_POLICIES) if p.name == name]
    return found


# -- validation


@pytest.mark.parametrize(
    ("kinds", "named"),
    [
        ({}, "exactly one"),
        ({"hpa": HpaSpec((WAITING,), 4), "static_replicas": 2}, "exactly one"),
        ({"keda": ScaledObject((Trigger("inference_demand", 5),)), "static_replicas": 2}, "exactly one"),
        ({"static_replicas": 0}, "static_replicas must be 1 or more"),
        ({"hpa": HpaSpec((MetricSpec("vllm:num_requests_waiting", "Pods", 5),), 4)}, "not a Pods metric"),
        ({"hpa": HpaSpec((MetricSpec("inference_requests_waiting", "External", 5),), 4)}, "not an External metric"),
        ({"hpa": HpaSpec((MetricSpec("inference_demand", "Pods", 5),), 4)}, "not a Pods metric"),
        ({"hpa": HpaSpec((MetricSpec("inference_demand", "Object", 5),), 4)}, "Object metrics"),
        ({"hpa": HpaSpec((WAITING,), 4, min_replicas=0)}, "minReplicas 0 needs an External metric"),
        ({"keda": ScaledObject((Trigger("queue_depth", 5),))}, "no metric the pipeline serves"),
        ({"keda": ScaledObject((Trigger("inference_requests_running", 2),))}, "minReplicaCount 0 needs a trigger"),
        ({"keda": ScaledObject((Trigger("inference_requests_running", 2, "Value"),), 1)}, "take AverageValue"),
        ({"keda": ScaledObject((Trigger("inference_demand", 0),))}, "target must be above 0"),
        ({"keda": ScaledObject((Trigger("inference_demand", 5),), 3, 2)}, "minReplicaCount <= maxReplicaCount"),
        ({"keda": ScaledObject((Trigger("inference_demand", 5),), polling_interval=7.5)}, "polling_interval"),
        ({"keda": ScaledObject((Trigger("inference_demand", 5),), polling_interval=0)}, "polling_interval"),
        ({"keda": ScaledObject((Trigger("inference_demand", 5),), cooldown_period=-1)}, "cooldown_period"),
        ({"keda": ScaledObject(())}, "at least one trigger"),
        ({"keda": ScaledObject((Trigger("inference_demand", 5),), 1, idle_replica_count=1)}, "idleReplicaCount"),
    ],
)
def test_a_policy_that_cannot_run_is_refused_saying_why(kinds: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        policy(**kinds)


@pytest.mark.parametrize("key", ["name", "recommended_by", "source"])
def test_a_policy_says_who_recommends_it_and_where(key: str) -> None:
    fields = {"name": "p", "recommended_by": "someone", "source": "somewhere"} | {key: " "}
    with pytest.raises(ValueError, match=key):
        Policy(fields["name"], fields["recommended_by"], fields["source"], static_replicas=1)


def test_each_kind_is_accepted_alone() -> None:
    assert policy(hpa=HpaSpec((DEMAND,), 4, min_replicas=0)).kind == "hpa"
    assert policy(keda=ScaledObject((Trigger("inference_demand", 5),))).kind == "keda"
    assert policy(static_replicas=3).kind == "static"
    assert policy(static_replicas=3).metrics == ()


def test_a_keda_trigger_on_a_pods_metric_is_accepted_beside_an_external_one_at_zero() -> None:
    so = ScaledObject((Trigger("inference_requests_waiting", 5), Trigger("inference_request_activity", 1)))
    assert policy(keda=so).metrics == ("inference_requests_waiting", "inference_request_activity")


def test_static_policy_and_a_new_cap() -> None:
    assert static_policy(7).static_replicas == 7
    assert static_policy(7).kind == "static"
    seed, stack = with_max_replicas(by_name("seed-gpu-utilization"), 12), with_max_replicas(by_name("kserve"), 3)
    assert seed.hpa is not None
    assert seed.hpa.max_replicas == 12
    assert stack.keda is not None
    assert stack.keda.max_replica_count == 3
    assert with_max_replicas(static_policy(7), 2) == static_policy(7)


# -- the peers, as their sources write them


def test_the_policies_compared() -> None:
    assert [p.name for p in POLICIES] == [
        "seed-gpu-utilization",
        "production-stack",
        "llm-d-wva",
        "llm-d-epp-saturation",
        "llm-d-epp-queue",
        "kserve",
        "gpuscale",
    ]


def test_the_seed() -> None:
    # manifests/examples/gpu-hpa/hpa.yaml: Pods gpu_utilization AverageValue "70", minReplicas 1, scaleDown
    # stabilizationWindowSeconds 300 (its maxReplicas 8 is the example's cluster; the replay's cap replaces it)
    assert by_name("seed-gpu-utilization").hpa == HpaSpec(
        metrics=(MetricSpec("gpu_utilization", "Pods", 70, "AverageValue"),),
        min_replicas=1,
        max_replicas=DEFAULT_MAX_REPLICAS,
        behavior=Behavior(scale_down=ScalingRules(stabilization_window_seconds=300)),
    )


def test_production_stack() -> None:
    # vllm-project/production-stack tutorials/20-keda-autoscaling.md §7 "Scale Down to Zero" (41b93c42, 2026-04-13):
    # minReplicaCount 0, pollingInterval 15, cooldownPeriod 360; trigger 1 query vllm:num_requests_waiting,
    # threshold '5'; trigger 2 query sum(rate(vllm:num_incoming_requests_total[1m]) > bool 0), threshold "1";
    # no metricType (KEDA's default AverageValue), no activationThreshold (the Prometheus scaler's default 0)
    so = by_name("production-stack").keda
    assert so == ScaledObject(
        triggers=(
            Trigger("inference_requests_waiting", 5, "AverageValue", 0),
            Trigger("inference_request_activity", 1, "AverageValue", 0),
        ),
        min_replica_count=0,
        max_replica_count=DEFAULT_MAX_REPLICAS,
        polling_interval=15,
        cooldown_period=360,
        initial_cooldown_period=0,
        idle_replica_count=None,
        behavior=None,
    )


def test_llm_d_wva() -> None:
    # llm-d-incubation/workload-variant-autoscaler docs/saturation-scaling-config.md (93aa06c4): kvCacheThreshold
    # 0.80 (80 in the adapter's percent), queueLengthThreshold 5; its actuator HPA, llm-d/llm-d
    # guides/workload-autoscaling/optimized-baseline-autoscaling/hpa.yaml (739e6a61): minReplicas 1, scaleUp and
    # scaleDown stabilizationWindowSeconds 120, Percent 100 per 15 s
    assert by_name("llm-d-wva").hpa == HpaSpec(
        metrics=(
            MetricSpec("inference_kv_cache_usage", "Pods", 80, "AverageValue"),
            MetricSpec("inference_requests_waiting", "Pods", 5, "AverageValue"),
        ),
        min_replicas=1,
        max_replicas=DEFAULT_MAX_REPLICAS,
        behavior=Behavior(
            scale_up=ScalingRules(stabilization_window_seconds=120, policies=PER_15S),
            scale_down=ScalingRules(stabilization_window_seconds=120, policies=PER_15S),
        ),
    )


@pytest.mark.parametrize(
    ("name", "signal"),
    [
        # llm-d/llm-d guides/workload-autoscaling/keda-epp/optimized-baseline/overlays/k8s/saturation/
        # scaledobject.yaml (321a7e8c): max(llm_d_epp_flow_control_pool_saturation{...}) threshold "0.7"
        ("llm-d-epp-saturation", Trigger("inference_pool_saturation", 0.7, "AverageValue", 0)),
        # .../overlays/k8s/queue/scaledobject.yaml (057abb4a): sum(llm_d_epp_flow_control_queue_size{...}) "1"
        ("llm-d-epp-queue", Trigger("inference_demand", 1, "AverageValue", 0)),
    ],
)
def test_llm_d_keda_epp(name: str, signal: Trigger) -> None:
    # both overlays: sum(llm_d_epp_request_running{...}) threshold "16", metricType AverageValue, pollingInterval 15,
    # cooldownPeriod 300, minReplicaCount 1, scaleUp and scaleDown stabilizationWindowSeconds 300, Percent 100 / 15 s
    assert by_name(name).keda == ScaledObject(
        triggers=(signal, Trigger("inference_gateway_requests_running", 16, "AverageValue", 0)),
        min_replica_count=1,
        max_replica_count=DEFAULT_MAX_REPLICAS,
        polling_interval=15,
        cooldown_period=300,
        behavior=Behavior(
            scale_up=ScalingRules(stabilization_window_seconds=300, policies=PER_15S),
            scale_down=ScalingRules(stabilization_window_seconds=300, policies=PER_15S),
        ),
    )


def test_kserve() -> None:
    # kserve/website docs/model-serving/generative-inference/autoscaling/autoscaling.md (54acd462, 2025-09-13):
    # External, query vllm:num_requests_running, target Value "2", minReplicas 1. keda_reconciler.go writes the
    # target as the trigger's threshold and sets no metricType (KEDA's AverageValue), no pollingInterval or
    # cooldownPeriod (KEDA's 30 and 300) and no behavior
    assert by_name("kserve").keda == ScaledObject(
        triggers=(Trigger("inference_requests_running", 2, "AverageValue", 0),),
        min_replica_count=1,
        max_replica_count=DEFAULT_MAX_REPLICAS,
        polling_interval=30,
        cooldown_period=300,
        behavior=None,
    )


def test_gpuscale_first_proposal() -> None:
    # manifests/examples/inference-hpa/hpa.yaml: External inference_demand AverageValue "5", minReplicas 0,
    # scaleDown stabilizationWindowSeconds 600; plus the KV cache at llm-d's 0.8 (80 %) as a Pods average
    assert by_name("gpuscale-first-proposal").hpa == HpaSpec(
        metrics=(
            MetricSpec("inference_demand", "External", 5, "AverageValue"),
            MetricSpec("inference_kv_cache_usage", "Pods", 80, "AverageValue"),
        ),
        min_replicas=0,
        max_replicas=DEFAULT_MAX_REPLICAS,
        behavior=Behavior(scale_down=ScalingRules(stabilization_window_seconds=600)),
    )
    assert by_name("gpuscale-first-proposal") not in POLICIES  # replayed only when named


def test_gpuscale_is_the_shipped_example_but_for_its_cap() -> None:
    shipped = render(MANIFESTS / "examples" / "inference-capacity-hpa").one("HorizontalPodAutoscaler", "chat")
    written = yaml.safe_load(manifest(by_name("gpuscale"), "llm", "chat"))
    assert written["spec"] == shipped["spec"] | {"maxReplicas": DEFAULT_MAX_REPLICAS}


def test_gpuscale() -> None:
    # the KV cache the arrivals need at llm-d's 0.8 (Value "80"), the activity to wake from zero (AverageValue "1"),
    # any step up at once, scaleDown stabilizationWindowSeconds 600
    assert by_name("gpuscale").hpa == HpaSpec(
        metrics=(
            MetricSpec("inference_capacity_demand", "External", 80, "Value"),
            MetricSpec("inference_activity", "External", 1, "AverageValue"),
        ),
        min_replicas=0,
        max_replicas=DEFAULT_MAX_REPLICAS,
        behavior=Behavior(
            scale_up=ScalingRules(stabilization_window_seconds=0, policies=(ScalingPolicy("Percent", 1000, 15),)),
            scale_down=ScalingRules(stabilization_window_seconds=600),
        ),
    )


# -- the metric names


def served_by_the_built_in_rules() -> dict[str, set[str]]:
    rules = parse_rules(default_rules_text(), "built-in")
    return {
        "pods": {r.name_as for r in rules.rules if r.label_for(PODS, BUILT_IN)},
        "external": {r.name_as for r in rules.external_rules},
    }


def test_the_built_in_names_are_the_adapters_and_the_extra_ones_are_not() -> None:
    served = served_by_the_built_in_rules()
    assert set(PODS_METRICS) <= served["pods"]
    assert set(EXTERNAL_METRICS) <= served["external"]
    assert not set(EXTRA_METRICS) & (served["pods"] | served["external"])


def test_every_metric_a_policy_reads_is_in_the_catalogue() -> None:
    names = set(PODS_METRICS) | set(EXTERNAL_METRICS) | set(EXTRA_METRICS)
    assert {m for p in POLICIES for m in p.metrics} <= names


# -- the manifests


@pytest.mark.parametrize(("value", "text"), [(80, "80"), (0.7, "0.7"), (5.0, "5"), (0, "0"), (1e6, "1000000")])
def test_quantity(value: float, text: str) -> None:
    assert quantity(value) == text


# production-stack's helm/values.yaml example (01eaf92c): idleReplicaCount 0, initialCooldownPeriod 60; with a
# selectPolicy and a tolerance-free behavior, so that every field the writer knows is read back once
HELM_EXAMPLE = policy(
    keda=ScaledObject(
        (Trigger("inference_requests_waiting", 5), Trigger("inference_request_rate", 2.5, "Value", 0.5)),
        min_replica_count=1,
        max_replica_count=5,
        polling_interval=15,
        cooldown_period=360,
        initial_cooldown_period=60,
        idle_replica_count=0,
        behavior=Behavior(scale_down=ScalingRules(300, "Min", (ScalingPolicy("Pods", 1, 60),))),
    )
)
ALL = [*POLICIES, HELM_EXAMPLE, static_policy(7)]


def parse(p: Policy) -> dict[str, Any]:
    text = manifest(p, "llm", "chat")
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


@pytest.mark.parametrize("p", ALL, ids=lambda p: p.name)
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_manifest_is_a_valid_object(p: Policy, version: str) -> None:
    obj = parse(p)
    assert problems(obj, version) == []
    assert obj["metadata"] == {"name": "chat", "namespace": "llm"}
    assert obj["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat"}


def rules_back(raw: dict[str, Any] | None) -> ScalingRules | None:
    if raw is None:
        return None
    found = raw.get("policies")
    return ScalingRules(
        stabilization_window_seconds=raw.get("stabilizationWindowSeconds"),
        select_policy=raw.get("selectPolicy"),
        policies=None
        if found is None
        else tuple(ScalingPolicy(f["type"], f["value"], f["periodSeconds"]) for f in found),
    )


def behavior_back(raw: dict[str, Any] | None) -> Behavior | None:
    return None if raw is None else Behavior(rules_back(raw.get("scaleUp")), rules_back(raw.get("scaleDown")))


def hpa_back(spec: dict[str, Any]) -> HpaSpec:
    metrics = []
    for m in spec["metrics"]:
        source = m["type"]
        body = m["pods" if source == "Pods" else "external"]
        target = body["target"]
        value = target["averageValue"] if target["type"] == "AverageValue" else target["value"]
        metrics.append(MetricSpec(body["metric"]["name"], source, float(value), target["type"]))
    return HpaSpec(tuple(metrics), spec["maxReplicas"], spec["minReplicas"], behavior_back(spec.get("behavior")))


def scaled_object_back(spec: dict[str, Any]) -> ScaledObject:
    triggers = tuple(
        Trigger(t["metadata"]["metricName"], float(t["metadata"]["targetValue"]), t["metricType"],
                float(t["metadata"]["activationValue"]))
        for t in spec["triggers"]
    )  # fmt: skip
    hpa_config = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {})
    return ScaledObject(
        triggers,
        min_replica_count=spec["minReplicaCount"],
        max_replica_count=spec["maxReplicaCount"],
        polling_interval=spec["pollingInterval"],
        cooldown_period=spec["cooldownPeriod"],
        initial_cooldown_period=spec.get("initialCooldownPeriod", 0),
        idle_replica_count=spec.get("idleReplicaCount"),
        behavior=behavior_back(hpa_config.get("behavior")),
    )


@pytest.mark.parametrize("p", [*POLICIES, HELM_EXAMPLE], ids=lambda p: p.name)
def test_the_manifest_reads_back_as_the_policy(p: Policy) -> None:
    obj = parse(p)
    if p.hpa is not None:
        assert obj["kind"] == "HorizontalPodAutoscaler"
        assert hpa_back(obj["spec"]) == p.hpa
    else:
        assert obj["kind"] == "ScaledObject"
        assert scaled_object_back(obj["spec"]) == p.keda


def test_a_static_manifest_pins_the_count() -> None:
    spec = parse(static_policy(7))["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (7, 7)


@pytest.mark.parametrize("p", [p for p in POLICIES if p.keda is not None], ids=lambda p: p.name)
def test_every_trigger_is_a_question_the_adapters_scaler_accepts(p: Policy) -> None:
    served = served_by_the_built_in_rules()
    for trigger in parse(p)["spec"]["triggers"]:
        assert (trigger["type"], trigger["metadata"]["scalerAddress"]) == ("external", policies.SCALER_ADDRESS)
        assert trigger["authenticationRef"] == {"kind": "ClusterTriggerAuthentication", "name": "gpuscale-adapter"}
        query = parse_metadata(trigger["metadata"])  # BadRequest for an unknown key or a wrong value
        if query.metric_type is MetricType.PODS:
            assert query.metric in served["pods"]
            assert str(query.label_selector) == "app=chat"
        else:
            assert query.metric in served["external"] | set(EXTRA_METRICS)


def test_a_manifest_names_the_metrics_the_adapter_does_not_serve_yet() -> None:
    head = manifest(by_name("production-stack"), "llm", "chat").splitlines()[:3]
    assert head[2].endswith("inference_request_activity (docs/replay-policies.md)")
    assert not manifest(by_name("llm-d-epp-saturation"), "llm", "chat").splitlines()[2].startswith("#")


def test_a_pods_trigger_takes_the_label_selector_given() -> None:
    trigger = yaml.safe_load(manifest(by_name("kserve"), "llm", "chat", "model=qwen"))["spec"]["triggers"][0]
    assert trigger["metadata"]["labelSelector"] == "model=qwen"


def test_a_floor_raises_an_autoscaled_policys_minimum_and_says_so_in_its_name() -> None:
    floored = {p.name: with_min_replicas(p, 4) for p in POLICIES}
    for name, p in floored.items():
        lows = [p.hpa.min_replicas] if p.hpa is not None else [p.keda.min_replica_count] if p.keda is not None else []
        assert lows, name
        assert lows[0] >= 4, name
    assert floored["gpuscale"].name == "gpuscale, min 4"
    gpuscale = floored["gpuscale"].hpa
    assert gpuscale is not None
    assert gpuscale.min_replicas == 4  # it was 0: scale to zero is given up
    assert with_min_replicas(static_policy(3), 4) == static_policy(3)
    assert with_min_replicas(GPUSCALE, 0) is GPUSCALE


def test_the_forecast_policy_is_gpuscales_with_a_floor_and_replays_without_it_for_yesterday() -> None:
    forecast = by_name("gpuscale-forecast")
    assert forecast not in POLICIES
    assert forecast.metrics == (*GPUSCALE.metrics, "inference_capacity_forecast")
    assert policies.without_forecast(forecast).hpa == GPUSCALE.hpa
