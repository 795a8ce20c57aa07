"""The demo (``make run``, or ``python -m demo``): closed autoscaling loops, for training on GPU utilization and for
inference on the requests waiting, live, on this machine.

It starts the whole chain (demo/stack.py): the collector, on this machine's free GPUs or on simulated H200s, a real
Prometheus, the adapter, and stand-ins for the Kubernetes API and the kubelet. A Deployment ``trainer`` starts with
one replica; work arrives, a total that spreads evenly over the replicas (demo/workload.py); an HPA controller
(demo/hpa_controller.py, demo/hpa.py) reads ``gpu_utilization`` from the custom metrics API every sync, as an HPA
does, and scales the Deployment: each new replica is a pod on a free GPU, and the work spreads over it. On
simulated GPUs two ``infer`` pods also share one GPU, to show each getting its own share. Beside it a Deployment
``chat`` starts with none: each replica is an inference engine (``gpuscale-load serve --simulate``'s, demo/chat.py)
behind a gateway that holds requests while none serves, and its HPA reads ``inference_demand`` from the external
metrics API and scales it from zero and back to zero (demo/plan.py says when). Every sync prints what the APIs
answered; every scaling decision prints its reason. At the end: a picture (PNG, and HTML with ``--html``).
It ends by itself, or at Ctrl-C, SIGTERM or SIGHUP, and stops everything it started (demo/lifetime.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from common.flags import plain
from demo import chart, kubectl, lifetime, page
from demo.chat import ENGINE_LABEL, ChatService, scrape_job
from demo.console import Console
from demo.decisions import decision_line, external_line, worth_saying
from demo.deployment import Deployment
from demo.hpa import Autoscaler
from demo.hpa_controller import ExternalHpaController, HpaController, Sync
from demo.node import Node, has_gpu, real_node, simulated_node
from demo.plan import (
    CHAT_NAMESPACE,
    CHAT_REPLICAS,
    FULL_LOOP_SECONDS,
    LOAD_SECONDS,
    SECONDS,
    SYNC_PERIOD,
    Plan,
    plan_for,
    settings_text,
)
from demo.record import ChatSample, Record
from demo.stack import Pod, Stack
from demo.table import ChatTable, Table, console_header, console_line
from demo.workload import SharedWork, Workload
from harness.kube.api import TOKEN
from harness.kube.kubectl import find_kubectl
from harness.processes import free_port

GATEWAY = "chat-gateway"  # the gateway's pod
NODE = "demo-node"  # the stack's node, and so the engines' node label


async def show_kubectl(console: Console, controller: HpaController, adapter_url: str, workdir: Path, sync: Sync) -> str:
    """Once: the command a user would type for what the HPA just read, and its answer, whole; what it printed."""
    path = controller.metric_path(star="*")
    command = kubectl.user_command(path)
    console.print("\nwhat the HPA reads, as you would ask it:")
    found = find_kubectl()
    answer, note = sync.answer, "(kubectl not found: the answer the HPA got over HTTP)"
    if found is not None:
        try:
            answer = await kubectl.get_raw(found, kubectl.kubeconfig(workdir / "adapter.kubeconfig", adapter_url), path)
            note = ""
        except RuntimeError as e:
            note = f"({e}: the answer the HPA got over HTTP)"
    shown = kubectl.block(command, answer, note)
    console.print(shown + "\n")
    return shown


def chat_ports() -> dict[str, int]:
    """A /metrics port for each chat pod that may be (``chat-0``...), and the gateway's."""
    return {name: free_port() for name in (*(f"chat-{n}" for n in range(CHAT_REPLICAS)), GATEWAY)}


async def control_loop(
    console: Console, stack: Stack, node: Node, plan: Plan, chat: ChatService, seconds: float, workdir: Path
) -> Record:
    spec = plan.spec
    stack.pods_of("others")(node.others)
    stack.pods_of("gateway")([Pod(GATEWAY, {"app": GATEWAY, ENGINE_LABEL: "true"}, (), namespace=CHAT_NAMESPACE)])
    work = SharedWork(node.work)
    trainer = Deployment("trainer", node.gpus, stack.pods_of("trainer"))
    trainer.scale(spec.min_replicas)
    workload = Workload(plan.script, trainer, work.part("trainer"))
    chat_pods, chat_work = stack.pods_of("chat"), work.part("chat")

    def apply_chat(pods: list[Pod]) -> None:
        chat_pods(pods)
        chat.assign(pods)

    without_gpus = None if node.chat_gpus else CHAT_REPLICAS
    inference = Deployment("chat", node.chat_gpus, apply_chat, namespace=CHAT_NAMESPACE,
                           labels={ENGINE_LABEL: "true"}, max_replicas=without_gpus)  # fmt: skip
    inference.scale(plan.chat_spec.min_replicas)
    table = Table(tuple(f"trainer-{n}" for n in range(spec.max_replicas)), tuple(p.name for p in node.others))
    record = Record(table, ChatTable(f"chat (namespace {CHAT_NAMESPACE})"))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        controller = HpaController(session, stack.adapter_url, stack.kube.url, TOKEN, stack.namespace,
                                   "gpu_utilization", trainer, Autoscaler(spec))  # fmt: skip
        chat_controller = ExternalHpaController(session, stack.adapter_url, CHAT_NAMESPACE, "inference_demand",
                                                inference, Autoscaler(plan.chat_spec))  # fmt: skip
        for line in console_header(table, record.chat_table):
            console.print(line)
        shown = False
        started = time.monotonic()
        serving = asyncio.create_task(chat.run(started))
        try:
            next_sync = 0.0
            while (elapsed := time.monotonic() - started) < seconds:
                if serving.done():
                    serving.result()  # the engines' or the gateway's error, raised here
                await workload.update(elapsed)
                if node.chat_gpus:  # simulated GPUs, busy while their engine is in a step
                    busy = chat.busy(elapsed)
                    await chat_work.set({gpu: busy.get(name, 0.0) for name, gpu in inference.pods.items()})
                if elapsed >= next_sync:
                    next_sync += SYNC_PERIOD
                    sync = await controller.sync(elapsed)
                    await workload.update(elapsed)  # new replicas take their share at once
                    ready = len(chat.ready)  # as the sync finds them, as its replicas are
                    chat_sync = await chat_controller.sync(elapsed)
                    others = await stack.pod_metric("gpu_utilization", "app=infer") if table.shared else {}
                    waiting = await stack.external_metric(CHAT_NAMESPACE, "inference_requests_waiting")
                    sample = ChatSample(chat_sync, ready, waiting)
                    previous = record.syncs[-1].decision if record.syncs else None
                    chat_previous = record.chat[-1].sync.decision if record.chat else None
                    record.syncs.append(sync)
                    record.chat.append(sample)
                    record.shared.append(others)
                    row = table.add(sync, others)
                    chat_row = record.chat_table.add(chat_sync, sample.ready, waiting)
                    console.print(console_line(table, row, record.chat_table, chat_row))
                    if worth_saying(sync.decision, previous):
                        record.decisions.append(decision_line("trainer", sync, spec.target))
                        console.print("   → " + record.decisions[-1].lstrip())
                    if worth_saying(chat_sync.decision, chat_previous):
                        record.decisions.append(external_line("chat", chat_sync, "inference_demand", plan.chat_spec))
                        console.print("   → " + record.decisions[-1].lstrip())
                    everyone = len(sync.pods) >= min(2, spec.max_replicas) and set(sync.pods) <= set(sync.values)
                    if not shown and everyone:
                        shown = True
                        record.kubectl = await show_kubectl(console, controller, stack.adapter_url, workdir, sync)
                console.progress(elapsed, progress_note(record, plan, trainer.replicas, inference.replicas))
                await asyncio.sleep(0.25)
        finally:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
    console.end()
    return record


def progress_note(record: Record, plan: Plan, trainers: int, chats: int) -> str:
    average = record.syncs[-1].decision.proposal.average if record.syncs else None
    demand = record.chat[-1].sync.decision.proposal.average if record.chat else None
    shown_average = "-" if average is None else f"{average:.0f}"
    shown_demand = "-" if demand is None else f"{demand:g}"
    return (
        f"trainer {trainers}, average {shown_average} (target {plan.spec.target:g}); "
        f"chat {chats}, demand {shown_demand} (target {plan.chat_spec.target:g} a replica)"
    )


def path_of(decisions: list[int], first: int) -> str:
    return " → ".join(map(str, [first, *decisions]))


def write_outputs(console: Console, record: Record, plan: Plan, header: str, png: Path, html: Path | None) -> None:
    """The picture, and with ``html`` the page: ``header`` (the settings, as printed) and the record of the run."""
    title = "gpuscale demo: HPAs on gpu_utilization (custom metrics API) and inference_demand (external metrics API)"
    drawn = chart.available() and bool(record.syncs)
    panels = chart.ChatPanels(record.chat, plan.chat_spec, plan.arrivals.rate, plan.capacity) if record.chat else None

    def picture_titled(title: str | None) -> bytes:
        return chart.png(chart.figure(record.syncs, plan.spec, title, plan.script.total, panels, record.shared))

    picture = picture_titled(title) if drawn else None
    if picture is not None:
        png.write_bytes(picture)
        console.print(f"picture: {png.resolve()}")
    elif not chart.available():
        console.print("no picture: matplotlib is not installed (pip install 'gpuscale[plot]'); the table is the record")
    if html is not None:
        # the page's heading is the title: its picture goes without one, or the page would say it twice
        inline = picture_titled(None) if drawn else None
        text = page.page(title, header, inline, record.decisions, record.table, record.kubectl,
                         record.chat_table if record.chat else None, chart.height(panels))  # fmt: skip
        html.write_text(text, encoding="utf-8")
        console.print(f"page: {html.resolve()}")


async def run(seconds: float, target: float, simulate: bool, png: Path, html: Path | None) -> None:
    console = Console(sys.stdout, seconds)
    for stale in lifetime.remove_stale(Path(tempfile.gettempdir())):
        console.print(f"removed {stale}: left by a run that was killed")
    workdir = lifetime.make_workdir()
    node: Node | None = None
    try:
        node = simulated_node(workdir) if simulate else real_node(workdir, seconds)
        plan = plan_for(seconds, target, len(node.gpus), bool(node.chat_gpus))
        console.print(
            f"starting the chain on {node.kind}: collector, Prometheus, adapter, Kubernetes stand-ins ({workdir})"
        )
        ports = chat_ports()
        targets = {f"127.0.0.1:{port}": (CHAT_NAMESPACE, pod, NODE) for pod, port in ports.items()}
        chat = ChatService(plan.engine, {pod: port for pod, port in ports.items() if pod != GATEWAY},
                           ports[GATEWAY], LOAD_SECONDS)  # fmt: skip
        async with (
            Stack(workdir, collector_args=node.collector_args, node=NODE, namespaces=(CHAT_NAMESPACE,),
                  scrape_jobs=[scrape_job(targets)]) as stack,
            chat,
        ):  # fmt: skip
            prometheus = stack.prometheus.url if stack.prometheus else ""
            console.print(f"custom metrics API: {stack.adapter_url}/apis/custom.metrics.k8s.io/v1beta2 ; "
                          f"Prometheus: {prometheus} ; collector: {stack.collector_url}/metrics\n")  # fmt: skip
            header = settings_text(plan)
            if seconds < FULL_LOOP_SECONDS:
                header += (f"\n\nnote: in {seconds:g} s the loop may end before it scales back down: the syncs every "
                           f"3 s, the metrics' lag of about 2 s and a model's loading do not stretch with the run "
                           f"({FULL_LOOP_SECONDS:g} s or more shows both)")  # fmt: skip
            console.print(header + "\n")
            if not simulate:
                console.print(f"starting gpuscale-load on {len(node.gpus)} GPU(s), idle until a replica lands on one")
            await node.work.start()
            try:
                record = await control_loop(console, stack, node, plan, chat, seconds, workdir)
            finally:
                console.end()
                await node.work.close()  # the workers first, while what they are measured by still runs
            served = f"{chat.arrived} requests arrived for chat, {chat.finished} finished"
        trainers = [s.decision.replicas for s in record.syncs if s.decision.scales]
        chats = [s.sync.decision.replicas for s in record.chat if s.sync.decision.scales]
        console.print(f"\nreplicas: trainer {path_of(trainers, record.syncs[0].decision.current)}; "
                      f"chat {path_of(chats, record.chat[0].sync.decision.current)}; {served}; "
                      "every process the demo started has stopped")  # fmt: skip
        write_outputs(console, record, plan, header, png, html)
    finally:
        if node is not None:
            await node.work.close()
        shutil.rmtree(workdir, ignore_errors=True)


def outputs_problem(png: Path, html: Path | None) -> str:
    """What is wrong with the output paths, checked before the run; "" when both can be written as named."""
    named = [("--png", png, (".png",))] + ([("--html", html, (".html", ".htm"))] if html is not None else [])
    for flag, path, suffixes in named:
        if path.suffix.lower() not in suffixes:
            return f"{flag} {path}: the file would not be what its name says; give a name ending in {suffixes[0]}"
        folder = path.parent
        if not folder.is_dir():
            return f"{flag} {path}: there is no directory {folder}"
        if not os.access(folder, os.W_OK):
            return f"{flag} {path}: the directory {folder} is not writable"
        if path.is_dir():
            return f"{flag} {path}: is a directory"
    return ""


USAGE_EPILOG = "\n".join([
    "through make, the options go in ARGS:",
    '  make run ARGS="--html demo.html"',
    '  make run ARGS="--png /tmp/run.png --html /tmp/run.html --seconds 150"',
])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m demo", description=plain(__doc__), epilog=USAGE_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument(
        "--seconds",
        type=float,
        default=SECONDS,
        help=f"how long to run (default {SECONDS:g}); the work's and the requests' scripts and the scale-down "
        f"windows stretch with it (below {FULL_LOOP_SECONDS:g} s the run may end before it scales down)",
    )
    parser.add_argument("--target", type=float, default=70.0, help="the HPA's gpu_utilization target (default 70)")
    parser.add_argument("--simulate", action="store_true", help="simulated GPUs even when this machine has GPUs")
    parser.add_argument("--png", type=Path, default=Path("gpuscale-demo.png"),
                        help="where the picture goes (default gpuscale-demo.png; needs matplotlib)")  # fmt: skip
    parser.add_argument("--html", type=Path, help="also write a self-contained HTML page here")
    args = parser.parse_args()
    if args.seconds <= 0 or args.target <= 0:
        parser.error("--seconds and --target must be above 0")
    problem = outputs_problem(args.png, args.html)
    if problem:
        parser.error(problem)  # before anything starts: a run is not lost at its end for a path that cannot be written
    simulate = args.simulate or not has_gpu()
    stopped = "every process the demo started has stopped, its temporary files are removed"
    try:
        asyncio.run(lifetime.stoppable(run(args.seconds, args.target, simulate, args.png, args.html)))
    except KeyboardInterrupt:
        print(f"\nstopped: {stopped}")
        sys.exit(130)
    except lifetime.Stopped as e:
        print(f"\nstopped by {e}: {stopped}")
        sys.exit(128 + e.signum)  # what a shell reports for a process the signal ended
    except (RuntimeError, OSError) as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
