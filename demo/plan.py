"""What a run of the demo does, and when: both Deployments' HPAs, the trainer's work, the requests for chat, and the
chat engines' settings; ``settings_text`` says it all before the run starts. Everything that is a time stretches
with ``--seconds`` except what a cluster would not stretch: the syncs, the metrics' lag and a model's loading.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from demo.arrival_script import ArrivalScript
from demo.chat import capacity
from demo.hpa import HpaSpec
from demo.hpa_controller import EXTERNAL
from demo.workload import LoadScript
from loadgen.serving.rate_file import RateSchedule
from loadgen.serving.scheduler import Limits
from loadgen.serving.settings import ServeSpec
from loadgen.serving.steps import StepCost

SECONDS = 75.0
# The trainer's timeline in the default 75 s, for 1 → 4 → 1 replicas whatever the phase of the syncs:
# - 2.7 GPUs' worth of work settles at 4 replicas by the algorithm, not by maxReplicas: 4 share it at 67.5 % (ratio
#   0.96, within the tolerance), 3 at 90 % (ceil(3 x 1.29) = 4), and 5 would be at 54 % (ceil(5 x 0.77) = 4).
#   A GPU shows 100 % at most, so from 1 replica the HPA sees ratio 1.43 and climbs 1 → 2 → 3 → 4, a step each time
#   the new pod's value has arrived (until then it is missing, counted as 0 on a scale-up, which holds the scale).
# - The values follow the work ~2 s late: the climb starts at the sync after ~12 s and takes 3-5 syncs of 3 s (on
#   this machine: 15, 18 and 21 s), so the replicas are steady at 4 well before the work leaves at 44 s.
# - Then 0.5 GPU's worth is 12.5 % on 4 replicas: ceil(4 x 0.18) = 1. The 12 s scale-down window holds 4 until the
#   last recommendation of 4 (~45-47 s) has left it: 4 → 1 at ~57-62 s (through 2 or 3 when a sync catches a value
#   halfway down, itself held by the window), and the last 10 s or more show one replica at 50 %.
SCRIPT = LoadScript(((0, 0.5), (10, 2.7), (44, 0.5)))
SYNC_PERIOD = 3.0  # the HPA controller's --horizontal-pod-autoscaler-sync-period is 15 s: too slow for 75 s
SCALE_UP_WINDOW = 0.0  # Kubernetes' default
SCALE_DOWN_WINDOW = 12.0  # Kubernetes' default is 300 s, which would not fit in 75 s; stretched with the run
# The syncs (3 s), the values' lag (~2 s) and a new pod's first value do not stretch: below this the climb to 4 and
# the way back may not both fit (at 30 s, with a window that did not stretch, the run ended before the scale-down)
FULL_LOOP_SECONDS = 45.0

CHAT_NAMESPACE = "llm"
CHAT_REPLICAS = 3  # maxReplicas: the simulated node's GPUs for chat
# Chat's timeline: no requests until 20 s, then 5 a second (1.6 times what one replica serves, 3.1) until 45 s.
# - At zero replicas the requests wait in the gateway, and inference_demand is its queue: the first sync that sees
#   them wakes chat (ceil(demand / 5)), and since the queue grows by 5 a second while the models load (4 s), the
#   next one asks for more, up to maxReplicas.
# - Once the engines serve, the backlog is theirs, and drains at what the replicas serve beyond 5 a second. A queue
#   reads ~0 whenever the replicas keep up, so from then on the syncs ask for 0 or 1 replica even while requests
#   still arrive: the scale-down window (20 s, longer than the trainer's: a model takes long to load; Kubernetes'
#   default 300 s, manifests/examples/inference-hpa 600 s) keeps the replicas the backlog asked for through the
#   rest of the burst, and lets them go, to zero, once it has passed and nothing waits.
ARRIVALS = ArrivalScript(((0, 0.0), (20, 5.0), (45, 0.0)))
CHAT_TARGET = 5.0  # requests waiting a replica: manifests/examples/inference-hpa's averageValue
CHAT_SCALE_DOWN_WINDOW = 20.0  # stretched with the run
LOAD_SECONDS = 4.0  # a new replica's model loading: from its pod's start to its first request; not stretched
# Each chat replica is gpuscale-load serve --simulate with these flags: steps of 20 ms and at most 8 requests (a model
# about ten times the weight traffic of serve's default, whose 1.8 ms steps would serve ~150 requests a second), so
# that the queues are a few requests to a few dozen and the demo's two cores run three engines with ease
ENGINE = ServeSpec(
    RateSchedule.constant(0.0), limits=Limits(max_batch=8, kv_tokens=8 * 384), simulate=True,
    cost=StepCost(fixed=0.020, per_token=0.0000085), model_name="chat-model",
)  # fmt: skip


@dataclass(frozen=True)
class Plan:
    spec: HpaSpec  # the trainer's HPA
    script: LoadScript  # the trainer's work
    chat_spec: HpaSpec
    arrivals: ArrivalScript
    engine: ServeSpec  # each chat replica's, with the arrivals as its rates
    capacity: float  # requests a second one chat replica serves at most
    chat_gpus: bool  # whether the chat replicas hold GPUs (simulated ones), or are simulated on none


def plan_for(seconds: float, target: float, max_replicas: int, chat_gpus: bool) -> Plan:
    stretch = seconds / SECONDS
    spec = HpaSpec(target, 1, max_replicas, scale_up_window=SCALE_UP_WINDOW,
                   scale_down_window=SCALE_DOWN_WINDOW * stretch)  # fmt: skip
    chat_spec = HpaSpec(CHAT_TARGET, 0, CHAT_REPLICAS, scale_up_window=SCALE_UP_WINDOW,
                        scale_down_window=CHAT_SCALE_DOWN_WINDOW * stretch)  # fmt: skip
    arrivals = ARRIVALS.stretched(stretch)
    engine = replace(ENGINE, rates=arrivals.schedule())
    return Plan(spec, SCRIPT.stretched(stretch), chat_spec, arrivals, engine, capacity(engine), chat_gpus)


def serve_flags(engine: ServeSpec) -> str:
    """The ``gpuscale-load serve`` command an engine is, without its rate (the gateway hands it its requests)."""
    limits, cost = engine.limits, engine.cost
    return (
        f"gpuscale-load serve --simulate --max-batch {limits.max_batch} --kv-tokens {limits.kv_tokens} "
        f"--sim-step-ms {1000 * cost.fixed:g} --sim-token-ms {1000 * cost.per_token:g} "
        f"--prompt-tokens {engine.prompt} --output-tokens {engine.output}"
    )


def settings_text(plan: Plan) -> str:
    spec, script, chat = plan.spec, plan.script, plan.chat_spec
    where = "its own simulated GPU each (busy while its engine is in a step)" if plan.chat_gpus else (
        "no GPU: simulated, the GPUs of this machine are the trainer's")  # fmt: skip
    return (
        f"HPA for Deployment trainer: Pods metric gpu_utilization, target averageValue {spec.target:g}, "
        f"{spec.min_replicas} to {spec.max_replicas} replicas, tolerance {spec.tolerance:g}\n"
        f"  sync every {SYNC_PERIOD:g} s (Kubernetes: 15 s); stabilization windows: scale-up "
        f"{spec.scale_up_window:g} s (Kubernetes' default 0 s), scale-down {spec.scale_down_window:g} s "
        f"(Kubernetes' default 300 s, shortened for the demo)\n"
        f"work: {script.describe()}; spread evenly over the replicas (each GPU busy total / replicas, at most 100 %)\n"
        f"HPA for Deployment chat (namespace {CHAT_NAMESPACE}): External metric inference_demand, target averageValue "
        f"{chat.target:g} (requests waiting a replica), {chat.min_replicas} to {chat.max_replicas} replicas\n"
        f"  reads {EXTERNAL}/namespaces/{CHAT_NAMESPACE}/inference_demand: the gateway's queue and the engines' "
        f"(demand; waiting: the engines' alone); same syncs, scale-down window {chat.scale_down_window:g} s\n"
        f"requests: {plan.arrivals.describe()}, to a gateway that holds them while no replica serves and hands each "
        f"to the replica holding the fewest\n"
        f"each chat replica: {serve_flags(plan.engine)}, on {where}; serves at most {plan.capacity:.1f} requests a "
        f"second, from {LOAD_SECONDS:g} s after its pod starts (its model loading)"
    )
