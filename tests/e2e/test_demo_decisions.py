"""What the run prints and plans that needs no running chain: the chat HPA's decision lines, worked by hand, the
console's header over both Deployments' columns, and what one chat engine serves."""

import json

import pytest

from demo.chat import capacity
from demo.decisions import external_line, worth_saying
from demo.hpa import Autoscaler, HpaSpec, propose_external
from demo.hpa_controller import ExternalSync
from demo.plan import ENGINE
from demo.table import SHARED, ChatTable, Table, console_header, console_line
from loadgen.serving.steps import ModelClock


def chat_sync(at: float, current: int, demand: float | None, hpa: Autoscaler) -> ExternalSync:
    values = () if demand is None else (demand,)
    proposal = propose_external(current, current, values, hpa.spec, per_pod=True)
    return ExternalSync(at, values, hpa.settle(at, current, proposal), answer=json.dumps({}))


def test_the_chat_decisions_say_the_demand_the_target_and_what_held_or_bounded_them() -> None:
    hpa = Autoscaler(HpaSpec(5, 0, 3, scale_down_window=20))
    syncs = [
        chat_sync(21, 0, 0, hpa),  # nothing waits: stays at zero, nothing to say
        chat_sync(24, 0, 16, hpa),  # ceil(16 / 5) = 4, bounded by maxReplicas
        chat_sync(33, 3, 6, hpa),  # ceil(6 / 5) = 2, held by the 4 of 24 s
        chat_sync(45, 3, 0, hpa),  # 0 wanted, the 4 of 24 s has left the window, the 2 of 33 s not
        chat_sync(66, 2, 0, hpa),
    ]
    lines = [
        external_line("chat", s, "inference_demand", hpa.spec)
        for previous, s in zip([None, *syncs], syncs, strict=False)
        if worth_saying(s.decision, None if previous is None else previous.decision)
    ]
    assert lines == [
        "  24s  chat     scale 0 → 3: inference_demand 16 against a target of 5 a replica: from zero: ceil(16 / 5); "
        "bounded by maxReplicas 3",
        "  33s  chat     hold at 3: inference_demand 6 against a target of 5 a replica: ratio 0.40; ceil(6 / 5) = 2; "
        "held to 3: highest recommendation of the last 20 s",
        "  45s  chat     scale 3 → 2: inference_demand 0 against a target of 5 a replica: ratio 0.00; ceil(0 / 5) = 0; "
        "held to 2: highest recommendation of the last 20 s",
        "  66s  chat     scale 2 → 0: inference_demand 0 against a target of 5 a replica: ratio 0.00; ceil(0 / 5) = 0",
    ]


def test_no_value_from_the_external_metrics_api_holds_and_says_why() -> None:
    hpa = Autoscaler(HpaSpec(5, 0, 3))
    sync = chat_sync(0, 0, None, hpa)
    assert sync.decision.replicas == 0
    assert external_line("chat", sync, "inference_demand", hpa.spec) == (
        "   0s  chat     hold at 0: no value for the metric (FailedGetExternalMetric)"
    )


def test_one_chat_engine_serves_what_its_batch_and_steps_allow() -> None:
    # 8 requests of 128 tokens a batch; a step decodes 8 tokens in 20.068 ms, and about one step in 16 also computes a
    # 256-token prompt (2.2 ms more): 8 / (128 x ~20.2 ms), about 3.1 a second
    assert capacity(ENGINE) == pytest.approx(8 / (128 * 0.0202), rel=0.02)
    clock = ModelClock()
    clock.sleep(0.25)
    assert clock.now() == 0.25


def test_the_console_names_the_groups_of_columns_over_them() -> None:
    table, chat = Table(("trainer-0",), ("infer-a", "infer-b")), ChatTable("chat (namespace llm)")
    groups, header = console_header(table, chat)
    assert header == "    t  replicas  average trainer-0 | infer-a infer-b | chat ready demand waiting"
    assert groups.index(SHARED) == header.index("infer-a")
    assert groups.index("chat (namespace llm)") == header.index("chat ready")
    row = console_line(table, ("3s", "1", "49.8", "49.8", "55.0", "20.0"), chat, ("3s", "0", "0", "12", "-"))
    assert row == "   3s         1     49.8      49.8 |    55.0    20.0 |    0     0     12       -"
