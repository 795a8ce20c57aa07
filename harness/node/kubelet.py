"""A stand-in for the kubelet's pod-resources API on a unix socket: real gRPC, scripted pods.

The demo serves its simulated pods with it; tests change ``pods`` between calls, make ``List`` block (``hold``) or
fail (``fail_with``). Also runs as a program, for machines with GPUs but no kubelet:

    python -m harness.node.kubelet SOCKET POD_SPEC...     POD_SPEC = namespace/pod/container=DEVICE[,DEVICE]
"""

from __future__ import annotations

import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from harness.node.podresources import api_pb2, api_pb2_grpc


@dataclass
class DraClaim:
    """A DRA ResourceClaim as the kubelet reports it for a container: its devices as (driver, pool, device)."""

    name: str
    namespace: str
    devices: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass
class FakePod:
    namespace: str
    name: str
    containers: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)  # container → [(resource, ids)]
    claims: dict[str, list[DraClaim]] = field(default_factory=dict)  # container → its DRA claims


def gpu_pod(
    namespace: str, name: str, *device_ids: str, resource: str = "nvidia.com/gpu", container: str = "main"
) -> FakePod:
    return FakePod(namespace, name, {container: [(resource, list(device_ids))]})


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, owner: PodResourcesServer) -> None:
        self._owner = owner

    def List(self, request: Any, context: Any) -> Any:
        owner = self._owner
        owner.calls += 1
        owner.held.wait()  # blocks while a test holds the kubelet
        if owner.fail_with is not None:
            context.abort(owner.fail_with, "scripted failure")
        return owner.answer()

    def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        return api_pb2.AllocatableResourcesResponse()


class PodResourcesServer:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.pods: list[FakePod] = []
        self.calls = 0
        self.fail_with: grpc.StatusCode | None = None
        self.held = threading.Event()
        self.held.set()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), self._server)  # type: ignore[no-untyped-call]
        self._server.add_insecure_port(f"unix://{socket_path}")

    def hold(self) -> None:
        """Make List block until ``release``: a hung kubelet."""
        self.held.clear()

    def release(self) -> None:
        self.held.set()

    def answer(self) -> api_pb2.ListPodResourcesResponse:
        """The ListPodResourcesResponse for ``pods``, as List sends it."""
        response = api_pb2.ListPodResourcesResponse()
        for pod in list(self.pods):
            pr = response.pod_resources.add(name=pod.name, namespace=pod.namespace)
            for cname in {**pod.containers, **pod.claims}:
                container = pr.containers.add(name=cname)
                container.cpu_ids.extend([0, 1])
                for resource, ids in pod.containers.get(cname, []):
                    container.devices.add(resource_name=resource, device_ids=ids)
                for claim in pod.claims.get(cname, []):
                    dynamic = container.dynamic_resources.add(claim_name=claim.name, claim_namespace=claim.namespace)
                    for driver, pool, device in claim.devices:
                        # the kubelet also lists the device's CDI names; NVIDIA's driver names them like this
                        cdi = [api_pb2.CDIDevice(name=f"k8s.{driver}/device={device}")]
                        dynamic.claim_resources.add(
                            cdi_devices=cdi, driver_name=driver, pool_name=pool, device_name=device
                        )
        return response

    def start(self) -> PodResourcesServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self.release()
        self._server.stop(grace=None).wait()


def parse_spec(spec: str) -> FakePod:
    where, _, devices = spec.partition("=")
    namespace, pod, container = where.split("/")
    return FakePod(namespace, pod, {container: [("nvidia.com/gpu.shared", devices.split(","))]})


if __name__ == "__main__":
    server = PodResourcesServer(sys.argv[1]).start()
    server.pods = [parse_spec(s) for s in sys.argv[2:]]
    print(f"pod-resources on {sys.argv[1]}: {len(server.pods)} pod(s)", flush=True)
    while True:
        time.sleep(3600)
