"""``gpuscale-demo`` (``make run``): a closed autoscaling loop on GPU utilization, live, on this machine.

It starts the whole chain (demo/stack.py): the collector, on this machine's free GPUs or on simulated H200s, a real
Prometheus, the adapter, and stand-ins for the Kubernetes API and the kubelet. A Deployment ``trainer`` starts with
one replica; work arrives, a total that spreads evenly over the replicas (demo/workload.py); an HPA controller
(demo/hpa_controller.py, demo/hpa.py) reads ``gpu_utilization`` from the custom metrics API every sync, as an HPA
does, and scales the Deployment: each new replica is a pod on a free GPU, and the work spreads over it. On
simulated GPUs two ``infer`` pods also share one GPU, to show each getting its own share. Every sync prints what
the API answered; every scaling decision prints its reason. At the end: a picture (PNG, and HTML with ``--html``).
It ends by itself, or at Ctrl-C, and stops everything it started.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from common.flags import plain
from demo import chart, kubectl
from demo.console import Console
from demo.deployment import Deployment
from demo.hpa import Autoscaler, HpaSpec
from demo.hpa_controller import HpaController, Sync
from demo.node import Node, has_gpu, real_node, simulated_node
from demo.stack import Stack
from demo.table import Table
from demo.workload import LoadScript, Workload
from harness.kube.api import TOKEN
from harness.kube.kubectl import find_kubectl

SECONDS = 75.0
# The timeline of the default 75 s, for 1 → 4 → 1 replicas whatever the phase of the syncs:
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


def decision_line(sync: Sync, target: float) -> str:
    decision, proposal = sync.decision, sync.decision.proposal
    if proposal.average is None or proposal.ratio is None:
        return f"{sync.at:4.0f}s  hold at {decision.current}: {sync.error or proposal.why}"
    verb = f"scale {decision.current} → {decision.replicas}" if decision.scales else f"hold at {decision.current}"
    why = f"; {decision.why}" if decision.why else ""
    return (
        f"{sync.at:4.0f}s  {verb}: average {proposal.average:.1f} against a target of {target:g}: "
        f"ratio {proposal.ratio:.2f}; {proposal.why}{why}"
    )


def worth_saying(sync: Sync, previous: Sync | None) -> bool:
    """Every scaling decision; a hold (the metric asks for a change that does not happen) or no values as they begin."""

    def kind(s: Sync | None) -> str:
        if s is None:
            return ""
        decision, proposal = s.decision, s.decision.proposal
        if decision.scales:
            return "scale"
        if proposal.replicas is None:
            return "no values"
        return "hold" if proposal.replicas != decision.current or decision.why or proposal.missing else ""

    now = kind(sync)
    return now == "scale" or now not in ("", kind(previous))


@dataclass
class Record:
    table: Table
    syncs: list[Sync] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    kubectl: str = ""  # the command and its answer, as printed ("" until the run has asked)


async def show_kubectl(console: Console, controller: HpaController, adapter_url: str, workdir: Path, sync: Sync) -> str:
    """Once: the command a user would type for what the HPA just read, and its answer, shortened; what it printed."""
    path = controller.metric_path(star="*")
    command = f"$ {kubectl.user_command(path)}"
    console.print(f"\nwhat the HPA reads, as you would ask it:\n{command}")
    found = find_kubectl()
    answer, note = sync.answer, "(kubectl not found: the answer the HPA got over HTTP)"
    if found is not None:
        try:
            answer = await kubectl.get_raw(found, kubectl.kubeconfig(workdir / "adapter.kubeconfig", adapter_url), path)
            note = ""
        except RuntimeError as e:
            note = f"({e}: the answer the HPA got over HTTP)"
    shown = kubectl.shorten(answer) + (f"\n{note}" if note else "")
    console.print(shown + "\n")
    return f"{command}\n{shown}"


async def control_loop(
    console: Console, stack: Stack, node: Node, spec: HpaSpec, script: LoadScript, seconds: float, workdir: Path
) -> Record:
    deployment = Deployment("trainer", node.gpus, lambda pods: stack.set_pods([*pods, *node.others]))
    deployment.scale(spec.min_replicas)
    workload = Workload(script, deployment, node.work)
    table = Table(tuple(f"trainer-{n}" for n in range(spec.max_replicas)), tuple(p.name for p in node.others))
    record = Record(table)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        controller = HpaController(session, stack.adapter_url, stack.kube.url, TOKEN, stack.namespace,
                                   "gpu_utilization", deployment, Autoscaler(spec))  # fmt: skip
        console.print(table.header())
        shown = False
        started = time.monotonic()
        next_sync = 0.0
        while (elapsed := time.monotonic() - started) < seconds:
            await workload.update(elapsed)
            if elapsed >= next_sync:
                next_sync += SYNC_PERIOD
                sync = await controller.sync(elapsed)
                await workload.update(elapsed)  # new replicas take their share at once
                others = await stack.pod_metric("gpu_utilization", "app=infer") if table.shared else {}
                previous = record.syncs[-1] if record.syncs else None
                record.syncs.append(sync)
                console.print(table.line(table.add(sync, others)))
                if worth_saying(sync, previous):
                    record.decisions.append(decision_line(sync, spec.target))
                    console.print("   → " + record.decisions[-1].lstrip())
                everyone = len(sync.pods) >= min(2, spec.max_replicas) and set(sync.pods) <= set(sync.values)
                if not shown and everyone:
                    shown = True
                    record.kubectl = await show_kubectl(console, controller, stack.adapter_url, workdir, sync)
            average = record.syncs[-1].decision.proposal.average if record.syncs else None
            replicas = f"{deployment.replicas} replica{'s' if deployment.replicas != 1 else ''}"
            shown_average = "-" if average is None else f"{average:.0f}"
            console.progress(elapsed, f"{replicas}, average {shown_average} (target {spec.target:g})")
            await asyncio.sleep(0.25)
    console.end()
    return record


def settings_text(spec: HpaSpec, script: LoadScript) -> str:
    return (
        f"HPA for Deployment trainer: Pods metric gpu_utilization, target averageValue {spec.target:g}, "
        f"{spec.min_replicas} to {spec.max_replicas} replicas, tolerance {spec.tolerance:g}\n"
        f"  sync every {SYNC_PERIOD:g} s (Kubernetes: 15 s); stabilization windows: scale-up "
        f"{spec.scale_up_window:g} s (Kubernetes' default 0 s), scale-down {spec.scale_down_window:g} s "
        f"(Kubernetes' default 300 s, shortened for the demo)\n"
        f"work: {script.describe()}; spread evenly over the replicas (each GPU busy total / replicas, at most 100 %)"
    )


def write_outputs(
    console: Console, record: Record, spec: HpaSpec, script: LoadScript, header: str, png: Path, html: Path | None
) -> None:
    """The picture, and with ``html`` the page: ``header`` (the settings, as printed) and the record of the run."""
    title = "gpuscale demo: an HPA on gpu_utilization from the custom metrics API"
    drawn = chart.available() and bool(record.syncs)
    picture = chart.png(record.syncs, spec, title, script.total) if drawn else None
    if picture is not None:
        png.write_bytes(picture)
        console.print(f"picture: {png.resolve()}")
    elif not chart.available():
        console.print("no picture: matplotlib is not installed (pip install 'gpuscale[plot]'); the table is the record")
    if html is not None:
        # the page's heading is the title: its picture goes without one, or the page would say it twice
        inline = chart.png(record.syncs, spec, None, script.total) if drawn else None
        text = chart.page(title, header, inline, record.decisions, record.table, record.kubectl)
        html.write_text(text, encoding="utf-8")
        console.print(f"page: {html.resolve()}")


async def run(seconds: float, target: float, simulate: bool, png: Path, html: Path | None) -> None:
    console = Console(sys.stdout, seconds)
    workdir = Path(tempfile.mkdtemp(prefix="gpuscale-demo-"))
    node: Node | None = None
    try:
        node = simulated_node(workdir) if simulate else real_node(workdir, seconds)
        stretch = seconds / SECONDS
        spec = HpaSpec(target, 1, len(node.gpus), scale_up_window=SCALE_UP_WINDOW,
                       scale_down_window=SCALE_DOWN_WINDOW * stretch)  # fmt: skip
        script = SCRIPT.stretched(stretch)
        console.print(
            f"starting the chain on {node.kind}: collector, Prometheus, adapter, Kubernetes stand-ins ({workdir})"
        )
        async with Stack(workdir, collector_args=node.collector_args) as stack:
            prometheus = stack.prometheus.url if stack.prometheus else ""
            console.print(f"custom metrics API: {stack.adapter_url}/apis/custom.metrics.k8s.io/v1beta2 ; "
                          f"Prometheus: {prometheus} ; collector: {stack.collector_url}/metrics\n")  # fmt: skip
            header = settings_text(spec, script)
            if seconds < FULL_LOOP_SECONDS:
                header += (f"\n\nnote: in {seconds:g} s the loop may end before it scales back down: the syncs every "
                           f"3 s and the metrics' lag of about 2 s do not stretch with the run "
                           f"({FULL_LOOP_SECONDS:g} s or more shows both)")  # fmt: skip
            console.print(header + "\n")
            if not simulate:
                console.print(f"starting gpuscale-load on {len(node.gpus)} GPU(s), idle until a replica lands on one")
            await node.work.start()
            try:
                record = await control_loop(console, stack, node, spec, script, seconds, workdir)
            finally:
                console.end()
                await node.work.close()  # the workers first, while what they are measured by still runs
        path = [record.syncs[0].decision.current] + [s.decision.replicas for s in record.syncs if s.decision.scales]
        console.print(f"\nreplicas: {' → '.join(map(str, path))}; every process the demo started has stopped")
        write_outputs(console, record, spec, script, header, png, html)
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


def main() -> None:
    parser = argparse.ArgumentParser(prog="gpuscale-demo", description=plain(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument(
        "--seconds",
        type=float,
        default=SECONDS,
        help=f"how long to run (default {SECONDS:g}); the work's script and the scale-down window "
        f"stretch with it (below {FULL_LOOP_SECONDS:g} s the run may end before it scales down)",
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
    try:
        asyncio.run(run(args.seconds, args.target, simulate, args.png, args.html))
    except KeyboardInterrupt:
        print("\nstopped: every process the demo started has stopped, its temporary files are removed")
        sys.exit(130)
    except (RuntimeError, OSError) as e:
        print(f"gpuscale-demo: error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
