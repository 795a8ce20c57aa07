"""The kubelet's List answer, read by the collector's wire reader and by the protobuf library: CPU per read.

The collector reads the answer every second (``collector/pods/kubelet_list.py``) without the protobuf library, which
cost 3.2 MB of resident memory; this measures what that costs in CPU. For each node size the answer is built as the
stand-in kubelet builds it (the library, with the stubs generated from the kubelet's api.proto: every pod with two
containers and their CPU IDs, one GPU for each of the first ``gpus`` pods), then read:

- ``wire reader``: ``kubelet_list.parse``;
- ``protobuf library``: ``ListPodResourcesResponse.FromString`` and a walk of every field the collector reads;
- ``whole refresh``: ``PodResourcesClient.fetch()`` on an event loop, against the stand-in kubelet over real gRPC on
  a unix socket (the HTTP/2 call, the read, the assignments), CPU of the calling thread.

    python -m bench.kubelet_list_bench [--pods 8,110,1000] [--repeat 300]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from collector.pods import kubelet_list
from collector.pods.pod_resources import PodResourcesClient
from harness.node.kubelet import FakePod, PodResourcesServer
from harness.node.podresources import api_pb2

GPUS = 8


def node(pods: int) -> list[FakePod]:
    return [
        FakePod(
            "ml-team",
            f"inference-{i:05d}-7d9f8c6b5d-x2x9q",
            {"main": [("nvidia.com/gpu", [f"GPU-8265e87e-95f8-2238-161a-22c2ab52{i:04d}"])] if i < GPUS else [],
             "sidecar": []},
        )
        for i in range(pods)
    ]  # fmt: skip


def by_library(answer: bytes) -> int:
    """The library's read, walked as the collector walks its own: every field it uses, touched once."""
    seen = 0
    for pod in api_pb2.ListPodResourcesResponse.FromString(answer).pod_resources:
        seen += len(pod.name) + len(pod.namespace)
        for c in pod.containers:
            seen += len(c.name)
            for d in c.devices:
                seen += len(d.resource_name) + sum(len(i) for i in d.device_ids)
            for r in c.dynamic_resources:
                seen += len(r.claim_name) + len(r.claim_namespace)
                seen += sum(len(x.driver_name) + len(x.pool_name) + len(x.device_name) for x in r.claim_resources)
    return seen


def cpu_ms(work: Callable[[], object], repeat: int) -> float:
    for _ in range(min(20, repeat)):
        work()
    start = time.thread_time()
    for _ in range(repeat):
        work()
    return (time.thread_time() - start) / repeat * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", default="8,110,1000", help="node sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    print(f"{platform.machine()}, Python {platform.python_version()}, {args.repeat} reads each, CPU of one thread\n")
    header = ["pods on the node", "answer (bytes)", "wire reader (ms)", "protobuf library (ms)", "ratio",
              "whole refresh (ms)"]  # fmt: skip
    print("| " + " | ".join(header) + " |\n" + "|---" * len(header) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        kubelet = PodResourcesServer(str(Path(tmp) / "kubelet.sock")).start()
        loop = asyncio.new_event_loop()  # one loop for every refresh, as the collector's
        try:
            client = PodResourcesClient(kubelet.socket_path, timeout=10)

            def fetch() -> int:
                return len(loop.run_until_complete(client.fetch()))

            for pods in (int(p) for p in args.pods.split(",")):
                kubelet.pods = node(pods)
                answer = kubelet.answer().SerializeToString()
                if len(kubelet_list.parse(answer)) != pods or fetch() != min(pods, GPUS):
                    raise SystemExit(f"{pods} pods were not read as built")
                ours = cpu_ms(partial(kubelet_list.parse, answer), args.repeat)
                library = cpu_ms(partial(by_library, answer), args.repeat)
                refresh = cpu_ms(fetch, max(10, args.repeat // 3))
                row = [pods, len(answer), f"{ours:.3f}", f"{library:.3f}", f"{ours / library:.1f}x", f"{refresh:.3f}"]
                print("| " + " | ".join(str(cell) for cell in row) + " |")
        finally:
            loop.close()
            kubelet.stop()


if __name__ == "__main__":
    main()
