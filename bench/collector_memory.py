"""Collector memory: resident set (RSS), proportional (PSS) and unique (USS) memory of the real collector process.

Starts ``python -m collector --simulate-gpus N`` with a counters file (``--counters every``: every field the collector
serves, every series and every label field; ``default``: dcgm-exporter's default counters with the profiling fields,
the file the collector serves without ``-f``), waits for the warm-up cycles, reads ``/proc/<pid>/smaps_rollup``, then
scrapes /metrics many times (text and OpenMetrics) and reads it again after more cycles. Each case can set environment
variables (``MALLOC_ARENA_MAX=2``) or add flags. Prints a Markdown table.

A case with ``-k`` runs as deployed: the Kubernetes API stand-in over HTTPS (``harness/kube/threaded.py``) with
``--pods`` pods on the collector's node (and a quarter as many on another), each with a few labels and about as much
JSON as a real pod has (8 KB: containers with their environment, volumes, status), and the kubelet's pod-resources
API (``harness/node/kubelet.py``) giving one GPU each to as many of them as there are GPUs. ``--kube in-cluster``
hands the collector a pod's service account (token and CA files, ``KUBERNETES_SERVICE_*``), as in a DaemonSet's pod;
``--kube kubeconfig`` a kubeconfig (``--kubeconfig``), which any tree's collector takes. ``--tree`` runs the
collector of another checkout (a ``git worktree`` of an older commit) under the same benchmark.

    python -m bench.collector_memory [--gpus 8] [--scrapes 2000] [--cycles 60] [--counters every|default]
        [--pods 64] [--kube in-cluster|kubeconfig] [--tree PATH] [--mappings N]
        [--case 'default' --case 'arenas=2:MALLOC_ARENA_MAX=2' --case 'k::-k --kubernetes-enable-pod-labels']

USS is the memory that would be freed if the process ended (private pages); PSS adds its share of pages it maps with
other processes (the Python binary, shared libraries); RSS counts shared pages whole, as ``kubectl top`` and the
kubelet's memory limit do (the cgroup charges pages to the first process that touched them).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib.util
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from bench.nvml_costs import DCGM_EXPORTER_DEFAULT_FILE, NO_BYTECODE, nvml_floor
from collector.nvml.fields import FIELDS, LABEL_FIELDS
from collector.simulation.nvml import SimulatedNvml
from harness.kube.threaded import ThreadedApiServer
from harness.node.collector_process import command
from harness.node.kubelet import FakePod, PodResourcesServer, gpu_pod
from harness.processes import free_port

KIB = 1024
NODE = "gpu-node-1"
ROOT = Path(__file__).resolve().parents[1]


def every_field_file(directory: Path) -> Path:
    """A counters file listing every field this collector serves, each with the type its table gives."""
    lines = [f"{name}, {field.type}, {name}" for name, field in FIELDS.items()]
    lines += [f"{name}, label, {name}" for name in sorted(LABEL_FIELDS)]
    path = directory / "every-field.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def default_counters_file(directory: Path) -> Path:
    """The counters file the collector serves without ``-f``: dcgm-exporter's defaults and the profiling fields."""
    from importlib import resources

    path = directory / "default-counters.csv"
    path.write_text(resources.files("collector.counters").joinpath("default-counters.csv").read_text())
    return path


def dcgm_exporter_file(directory: Path) -> Path:
    """Every field dcgm-exporter's default counters file lists, those it enables and those it comments out."""
    path = directory / "dcgm-exporter-default-file.csv"
    path.write_text("".join(f"{name}, {kind}, {name}\n" for name, kind in DCGM_EXPORTER_DEFAULT_FILE))
    return path


COUNTERS = {"every": every_field_file, "default": default_counters_file, "dcgm-exporter": dcgm_exporter_file}


def gpu_uuids(args: argparse.Namespace) -> list[str]:
    """The UUIDs of the GPUs the collector reads: the machine's with ``--real``, else the simulated ones."""
    if not args.real:
        return SimulatedNvml(args.gpus).uuids()
    import pynvml

    pynvml.nvmlInit()
    try:
        return [str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
                for i in range(pynvml.nvmlDeviceGetCount())]  # fmt: skip
    finally:
        pynvml.nvmlShutdown()


def pod_labels(i: int) -> dict[str, str]:
    """What a Deployment's or Job's pod typically carries."""
    return {
        "app.kubernetes.io/name": f"app-{i % 8}",
        "app.kubernetes.io/instance": f"release-{i % 4}",
        "pod-template-hash": f"{i:010x}",
        "team": ("ml", "vision", "speech")[i % 3],
    }


def pod_spec(i: int, gpu: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod's spec and status about as large as a real Deployment's pod's (8 KB of JSON): containers with their
    environment, mounts and probes, volumes, tolerations; conditions and container statuses."""
    env = [{"name": f"SETTING_{n}", "value": f"value-{i}-{n}-" + "x" * 40} for n in range(64)]
    mounts = [{"name": f"volume-{n}", "mountPath": f"/mnt/volume-{n}", "readOnly": n % 2 == 0} for n in range(8)]
    resources = {"limits": {"cpu": "8", "memory": "64Gi", **({"nvidia.com/gpu": "1"} if gpu else {})}}
    container = {
        "name": "main", "image": f"registry.example.com/team/app-{i % 8}:v1.2.3", "env": env,
        "volumeMounts": mounts, "resources": resources, "command": ["python", "-m", "app.serve"],
        "ports": [{"containerPort": 8000, "name": "http", "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8000}, "periodSeconds": 10},
    }  # fmt: skip
    spec = {
        "nodeName": NODE, "containers": [container], "serviceAccountName": "default", "restartPolicy": "Always",
        "volumes": [{"name": f"volume-{n}", "configMap": {"name": f"config-{n}"}} for n in range(8)],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }  # fmt: skip
    status = {
        "phase": "Running", "podIP": f"10.244.1.{i % 250}", "hostIP": "10.0.0.5",
        "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"}
                       for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
        "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "image": container["image"],
                               "containerID": f"containerd://{i:064x}", "started": True,
                               "state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}}}],
    }  # fmt: skip
    return spec, status


@dataclass
class Kubernetes:
    """What a ``-k`` collector is given: its flags, its environment and, in a pod, its service account."""

    flags: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    service_account: Path | None = None


@contextlib.contextmanager
def kubernetes(directory: Path, pods: int, uuids: list[str], how: str) -> Iterator[Kubernetes]:
    """The API stand-in with ``pods`` pods on the node, and the kubelet giving the first ones a GPU each."""
    gpus = len(uuids)
    with ThreadedApiServer(directory / "apiserver") as api:
        kubelet = PodResourcesServer(str(directory / "kubelet.sock")).start()
        try:
            listed = []
            for i in range(pods):
                name = f"worker-{i}"
                spec, status = pod_spec(i, i < gpus)
                api.put("pods", name, labels=pod_labels(i), namespace="ml", uid=f"uid-{i}", spec=spec, status=status)
                listed.append(gpu_pod("ml", name, uuids[i]) if i < gpus else FakePod("ml", name, {"main": []}))
            for i in range(pods // 4):  # other nodes' pods: the field selector leaves them out
                spec, status = pod_spec(i, False)
                api.put("pods", f"elsewhere-{i}", labels=pod_labels(i), namespace="ml",
                        spec={**spec, "nodeName": "other"}, status=status)  # fmt: skip
            kubelet.pods = listed
            flags = ["--pod-resources-kubelet-socket", kubelet.socket_path]
            if how == "kubeconfig":
                kubeconfig = api.kubeconfig(directory / "kubeconfig")
                yield Kubernetes([*flags, "--kubeconfig", str(kubeconfig)], {"NODE_NAME": NODE})
            else:
                account = directory / "serviceaccount"
                env = {"NODE_NAME": NODE, **api.service_account(account)}
                yield Kubernetes(flags, env, account)
        finally:
            kubelet.stop()


def smaps(pid: int) -> Iterator[tuple[str, str, int]]:
    """(mapping's name, key, bytes) for each size line of ``/proc/<pid>/smaps``: the name is a file's path,
    ``[heap]``, ``[stack]``, or ``[anon]`` for unnamed memory."""
    name = "[anon]"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and not fields[0].endswith(":"):  # a mapping's head: range perms offset dev inode [name]
            name = fields[5] if len(fields) > 5 else "[anon]"
        elif len(fields) == 3 and fields[2] == "kB":
            yield name, fields[0].rstrip(":"), int(fields[1]) * KIB


def memory(pid: int) -> dict[str, float]:
    """MiB figures from smaps_rollup (RSS, PSS, USS, anonymous) and the peak RSS from status; from smaps summed
    where the kernel has no smaps_rollup (before 4.14, and gVisor's before 2023)."""
    rollup: dict[str, int] = {}
    rolled = Path(f"/proc/{pid}/smaps_rollup")
    if rolled.exists():
        for line in rolled.read_text().splitlines()[1:]:
            key, value = line.split(":", 1)
            rollup[key] = int(value.split()[0]) * KIB
    else:
        for _, key, size in smaps(pid):
            rollup[key] = rollup.get(key, 0) + size
    status = Path(f"/proc/{pid}/status").read_text()
    peak = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)  # gVisor's before 2023 has none
    hwm = int(peak.group(1)) * KIB if peak else math.nan
    mib = 1024 * 1024
    return {
        "rss": rollup["Rss"] / mib,
        "pss": rollup["Pss"] / mib,
        "uss": (rollup["Private_Clean"] + rollup["Private_Dirty"]) / mib,
        "anon": rollup["Anonymous"] / mib,
        "hwm": hwm / mib,
    }


def mappings(pid: int) -> dict[str, float]:
    """MiB resident per mapping's name."""
    out: dict[str, float] = {}
    for name, key, size in smaps(pid):
        if key == "Rss":
            out[name] = out.get(name, 0.0) + size / (1024 * 1024)
    return out


def get(conn: http.client.HTTPConnection, accept: str = "") -> bytes:
    conn.request("GET", "/metrics", headers={"Accept": accept} if accept else {})
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"/metrics answered {resp.status}")
    return body


def cycles(body: bytes) -> int:
    match = re.search(rb"^gpuscale_collector_collections_total (\S+)$", body, re.M)
    return int(float(match.group(1))) if match else 0


def wait_cycles(conn: http.client.HTTPConnection, at_least: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        body = get(conn)
        if cycles(body) >= at_least:
            return body
        if time.monotonic() > deadline:
            raise RuntimeError(f"the collector did not reach {at_least} cycles in {timeout:.0f} s")
        time.sleep(0.2)


class CaseResult(TypedDict):
    case: str
    series: int
    pod_series: int  # series with a pod label
    bytes: int
    warm: dict[str, float]
    scraped: dict[str, float]
    later: dict[str, float]
    threads: int  # at the later reading
    mappings: dict[str, float]  # at the later reading


def run_case(
    name: str, env_extra: dict[str, str], flags: list[str], args: argparse.Namespace, counters: Path
) -> CaseResult:
    if "-k" not in flags and "--kubernetes" not in flags:
        return measure(name, env_extra, flags, args, counters, Kubernetes())
    uuids = gpu_uuids(args)
    with tempfile.TemporaryDirectory() as scratch, kubernetes(Path(scratch), args.pods, uuids, args.kube) as kube:
        return measure(name, env_extra, flags, args, counters, kube)


def measure(
    name: str, env_extra: dict[str, str], flags: list[str], args: argparse.Namespace, counters: Path, kube: Kubernetes
) -> CaseResult:
    port = free_port()
    tree = Path(args.tree).resolve()
    env = {**os.environ, "PYTHONPATH": str(tree), **kube.env, **env_extra}
    simulated = [] if args.real else ["--simulate-gpus", str(args.gpus)]
    start = [sys.executable, *command(service_account=kube.service_account), *simulated]
    log = counters.parent / f"collector-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*start, "-f", str(counters), "-a", f"127.0.0.1:{port}", *kube.flags, *flags],
            cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                body = get(conn)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: collector did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        body = wait_cycles(conn, args.warmup, 120)
        if kube.env:
            body = wait_for_pods(conn, min(len(gpu_uuids(args)), args.pods), log)
        series = sum(1 for line in body.splitlines() if line.startswith(b"DCGM_"))
        pod_series = sum(1 for line in body.splitlines() if line.startswith(b"DCGM_") and b'pod="' in line)
        warm = memory(proc.pid)
        for i in range(args.scrapes):
            get(conn, "application/openmetrics-text; version=1.0.0" if i % 2 else "")
        scraped = memory(proc.pid)
        wait_cycles(conn, cycles(get(conn)) + args.cycles, args.cycles * 3 + 60)
        later = memory(proc.pid)
        return {"case": name, "series": series, "pod_series": pod_series, "bytes": len(body), "warm": warm,
                "scraped": scraped, "later": later, "threads": len(os.listdir(f"/proc/{proc.pid}/task")),
                "mappings": mappings(proc.pid)}  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def wait_for_pods(conn: http.client.HTTPConnection, gpus: int, log: Path, timeout: float = 60) -> bytes:
    """The page once every GPU's series name its pod and carry its labels (the pod watch synced)."""
    deadline = time.monotonic() + timeout
    while True:
        body = get(conn)
        owned = {m.group(1) for m in re.finditer(rb'^DCGM_FI_DEV_GPU_TEMP\{.*pod="([^"]+)".*team="', body, re.M)}
        if len(owned) >= gpus:
            return body
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods did not reach the GPUs' series: {log.read_text()[-2000:]}")
        time.sleep(0.2)


def bytecode_cached(tree: Path) -> str:
    """Whether the standard library, pynvml, the HTTP libraries and the collector have bytecode where this interpreter
    (and a case's, unless it sets ``PYTHONPYCACHEPREFIX``) looks for it. Compiling at import leaves the process
    larger: a run without the cache is not the collector as its image runs it (docs/collector-bench.md)."""
    groups = {
        "standard library": ("asyncio", "ssl", "json"),
        "pynvml": ("pynvml",),
        "h11, h2, hpack": ("h11", "h2", "hpack.huffman_table"),  # hpack's Huffman table is a large source file
    }
    origins = {name: [_origin(module) for module in modules] for name, modules in groups.items()}
    origins["collector"] = [str(tree / "collector" / "cli.py"), str(tree / "collector" / "kube" / "client.py")]
    return ", ".join(
        f"{name} {'yes' if all(o and Path(importlib.util.cache_from_source(o)).exists() for o in found) else 'no'}"
        for name, found in origins.items()
    )


def _origin(module: str) -> str | None:
    spec = importlib.util.find_spec(module)
    return spec.origin if spec is not None else None


def parse_case(text: str) -> tuple[str, dict[str, str], list[str]]:
    """``name[:VAR=value,...][:--flag ...]`` → (name, environment, flags)."""
    name, _, rest = text.partition(":")
    env_text, _, flag_text = rest.partition(":")
    env = dict(pair.split("=", 1) for pair in env_text.split(",") if pair)
    return name, env, flag_text.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=10, help="collection cycles before the first reading")
    parser.add_argument("--scrapes", type=int, default=2000, help="scrapes between the first and second reading")
    parser.add_argument("--cycles", type=int, default=60, help="further cycles before the last reading")
    parser.add_argument("--case", action="append", help="name[:VAR=value,...][:flags]; repeatable")
    parser.add_argument(
        "--counters",
        choices=tuple(COUNTERS),
        default="every",
        help="every field the collector serves, the built-in default counters file, or every field "
        "dcgm-exporter's default file lists",
    )
    parser.add_argument("--real", action="store_true", help="the machine's GPUs instead of --gpus simulated ones")
    parser.add_argument("--pods", type=int, default=64, help="pods on the node, for cases with -k")
    parser.add_argument(
        "--kube",
        choices=("in-cluster", "kubeconfig"),
        default="in-cluster",
        help="how a -k collector finds the API: a pod's service account, or --kubeconfig",
    )
    parser.add_argument("--tree", default=str(ROOT), help="the checkout whose collector runs (default: this one)")
    parser.add_argument(
        "--mappings",
        type=int,
        default=0,
        metavar="N",
        help="also print each case's N largest mappings (RSS) and its thread count at the last reading",
    )
    args = parser.parse_args()
    cases = [parse_case(c) for c in (args.case or ["default"])]
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines()
    model = next((line.split(":", 1)[1].strip() for line in lscpu if line.startswith("Model name")), "?")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs ({model}), {platform.platform()}, "
        f"Python {platform.python_version()}"
    )
    fields = {"every": "every field enabled", "default": "the default counters file"}.get(
        args.counters, "every field of dcgm-exporter's default file"
    )
    print(f"bytecode cached (else compiled at each start): {bytecode_cached(Path(args.tree))}")
    gpus = f"{len(gpu_uuids(args))} real GPU(s)" if args.real else f"{args.gpus} simulated GPUs"
    if args.real:
        for how, env in (("", None), ("; with no bytecode cache", NO_BYTECODE)):
            steps = ", ".join(f"{what} {mib:.1f}" for what, mib in nvml_floor(env))
            print(f"NVML's own floor, each in a new interpreter{how}: {steps}")
    print(
        f"{gpus}, {fields}; with -k {args.pods} pods on the node ({args.kube}); collector of "
        f"{args.tree}; readings after {args.warmup} cycles (warm), after {args.scrapes} scrapes (scraped) and "
        f"{args.cycles} cycles later (later); MiB\n"
    )
    print("| case | DCGM series | with a pod | body (bytes) | when | RSS | PSS | USS | anonymous | peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        counters = COUNTERS[args.counters](Path(tmp))
        results = []
        for name, env, flags in cases:
            r = run_case(name, env, flags, args, counters)
            results.append(r)
            for when, m in (("warm", r["warm"]), ("scraped", r["scraped"]), ("later", r["later"])):
                peak = "n/a" if math.isnan(m["hwm"]) else f"{m['hwm']:.1f}"
                print(
                    f"| {r['case']} | {r['series']} | {r['pod_series']} | {r['bytes']} | {when} | {m['rss']:.1f} | "
                    f"{m['pss']:.1f} | {m['uss']:.1f} | {m['anon']:.1f} | {peak} |"
                )
    if args.mappings:
        print_mappings(results, args.mappings)


def print_mappings(results: list[CaseResult], top: int) -> None:
    """Each case's largest mappings at its last reading, with its thread count."""
    print("\n| case | threads | mapping | RSS (MiB) |\n|---|---|---|---|")
    for r in results:
        for path, mib in sorted(r["mappings"].items(), key=lambda item: -item[1])[:top]:
            print(f"| {r['case']} | {r['threads']} | {path} | {mib:.2f} |")


if __name__ == "__main__":
    main()
