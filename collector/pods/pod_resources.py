"""Which container holds which GPU, from the kubelet's pod-resources gRPC API, refreshed on the event loop.

dcgm-exporter calls the kubelet inside every scrape; here ``PodResourcesWatcher`` refreshes in the background with a
bounded timeout per call, and the collection cycle (on its own thread) only reads the last ``PodMap``. A map older
than ``max_age`` (the kubelet stopped answering) is dropped rather than served, so no series keeps a pod that may have
ended.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol

from collector.errors import PodResourcesError
from collector.pods import grpc_unary, kubelet_list
from collector.pods.device_ids import DeviceRef, parse_device_id
from collector.pods.protowire import WireError
from collector.pods.resource_slices import GPU_DRIVER, DraDevice
from common.freshness import Freshness
from common.log_limit import LogLimit, left_out

log = logging.getLogger(__name__)

LIST = "/v1.PodResourcesLister/List"  # the kubelet's pod-resources v1 API (pods/kubelet_list.py)

GPU_RESOURCES = frozenset({"nvidia.com/gpu", "nvidia.com/gpu.shared"})
MIG_PREFIX = "nvidia.com/mig-"
_MAX_REPORTED_IDS = 256


@dataclass(frozen=True, order=True)
class Owner:
    namespace: str
    pod: str
    container: str
    details: tuple[tuple[str, str], ...] = ()  # how the pod holds the device, as labels: its DRA claim


@dataclass(frozen=True)
class Assignment:
    device: DeviceRef
    owner: Owner
    resource: str
    device_id: str


@dataclass(frozen=True)
class PodMap:
    assignments: tuple[Assignment, ...] = ()
    refreshed_at: float | None = None  # monotonic time of the refresh these assignments came from


class DraDevices(Protocol):
    """Which GPU a DRA device of ``gpu.nvidia.com`` is (``pods/resource_slices.py``)."""

    @property
    def synced(self) -> bool: ...

    def lookup(self, pool: str, device: str) -> DraDevice | None: ...


class PodResourcesClient:
    """``List`` over the kubelet's unix socket, turned into GPU assignments."""

    def __init__(
        self,
        socket_path: str,
        resource_names: Iterable[str] = (),
        timeout: float = 2.0,
        dra: DraDevices | None = None,
    ) -> None:
        """``dra``: also the GPUs of containers' DRA claims (``--kubernetes-enable-dra``); None ignores them, as
        dcgm-exporter does without that flag."""
        self.socket_path = socket_path
        self._extra = frozenset(resource_names)
        self._timeout = timeout
        self._dra = dra
        self._unknown_ids: set[str] = set()

    def claims_resolvable(self) -> bool:
        """Whether an answer read now can place every DRA claim: always without DRA, else once the ResourceSlices
        have been listed (before that, a claimed GPU is left out of the map)."""
        return self._dra is None or self._dra.synced

    def is_gpu_resource(self, name: str) -> bool:
        return name in GPU_RESOURCES or name.startswith(MIG_PREFIX) or name in self._extra

    async def fetch(self) -> list[Assignment]:
        self._check_socket()
        try:
            answer = await grpc_unary.call(self.socket_path, LIST, kubelet_list.REQUEST, self._timeout)
            pods = kubelet_list.parse(answer)
        except grpc_unary.GrpcError as e:
            raise PodResourcesError(e.code, f"List on {self.socket_path} failed: {e}") from e
        except WireError as e:
            raise PodResourcesError(
                "DATA_LOSS", f"List on {self.socket_path}: not a ListPodResourcesResponse: {e}"
            ) from e
        return self._assignments(pods)

    def _check_socket(self) -> None:
        try:
            mode = os.stat(self.socket_path).st_mode
        except FileNotFoundError:
            raise PodResourcesError("NoSocket", f"{self.socket_path} does not exist") from None
        except OSError as e:
            raise PodResourcesError("SocketUnreadable", f"{self.socket_path} cannot be read: {e}") from e
        if not stat.S_ISSOCK(mode):
            raise PodResourcesError("NotASocket", f"{self.socket_path} is not a socket")

    def _assignments(self, pods: list[kubelet_list.Pod]) -> list[Assignment]:
        out = []
        for pod in pods:
            for container in pod.containers:
                owner = Owner(pod.namespace, pod.name, container.name)
                for devices in container.devices:
                    if not self.is_gpu_resource(devices.resource_name):
                        continue
                    for device_id in devices.device_ids:
                        ref = parse_device_id(device_id)
                        if ref is None:
                            self._report_unknown(device_id, devices.resource_name, owner)
                            continue
                        out.append(Assignment(ref, owner, devices.resource_name, device_id))
                if self._dra is not None:
                    out.extend(self._claimed(container, owner, self._dra))
        return out

    def _claimed(self, container: kubelet_list.Container, owner: Owner, dra: DraDevices) -> Iterator[Assignment]:
        """The GPUs of a container's DRA claims (kubelet 1.31 and later name each claim's devices by driver, pool
        and device), with the claim as labels named as dcgm-exporter names them."""
        for claim in container.claims:
            for resource in claim.devices:
                if resource.driver_name != GPU_DRIVER:
                    continue
                device_id = f"{resource.pool_name}/{resource.device_name}"
                found = dra.lookup(resource.pool_name, resource.device_name)
                if found is None:
                    if dra.synced:  # before the first listing every device is unknown: nothing to report yet
                        claimed = f"DRA claim {claim.namespace}/{claim.name}"
                        self._report_unknown(device_id, claimed, owner, f"is in no ResourceSlice of {GPU_DRIVER}")
                    continue
                details = (
                    ("dra_claim_name", claim.name),
                    ("dra_claim_namespace", claim.namespace),
                    ("dra_driver_name", resource.driver_name),
                    ("dra_pool_name", resource.pool_name),
                    ("dra_device_name", resource.device_name),
                    *found.labels,
                )
                yield Assignment(found.ref, replace(owner, details=details), f"dra:{GPU_DRIVER}", device_id)

    def _report_unknown(
        self, device_id: str, resource: str, owner: Owner, why: str = "has a form this collector does not know"
    ) -> None:
        if device_id in self._unknown_ids or len(self._unknown_ids) >= _MAX_REPORTED_IDS:
            return
        self._unknown_ids.add(device_id)
        log.warning(
            "device ID %r of %s (pod %s/%s) %s; it is not attributed",
            device_id,
            resource,
            owner.namespace,
            owner.pod,
            why,
        )


class PodResourcesWatcher:
    """Refreshes the pod map every ``refresh`` seconds (``run``, a task on the event loop); ``current`` never blocks
    and may be read from any thread."""

    def __init__(
        self,
        client: PodResourcesClient,
        refresh: float = 1.0,
        max_age: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        source: Freshness | None = None,
    ) -> None:
        """``source`` hears of each refresh that worked and each failure (``/health`` fails past its bound)."""
        self._client = client
        self.source = source
        self._refresh = refresh
        self.max_age = max_age
        self._clock = clock
        self._map = PodMap()
        self.errors: Counter[str] = Counter()
        self._failing = False
        self._log_limit = LogLimit(60.0, clock)
        # the kubelet has answered (with every DRA claim resolvable) or failed: the first collection waits for this
        # (collection.py), so that it names its pods
        self.answered = False

    @property
    def current(self) -> PodMap:
        snapshot = self._map
        if snapshot.refreshed_at is not None and self._clock() - snapshot.refreshed_at > self.max_age:
            return PodMap(refreshed_at=snapshot.refreshed_at)
        return snapshot

    @property
    def fresh(self) -> bool:
        age = self.age()
        return age is not None and age <= self.max_age

    def age(self) -> float | None:
        refreshed = self._map.refreshed_at
        return None if refreshed is None else self._clock() - refreshed

    async def refresh_once(self) -> None:
        complete = self._client.claims_resolvable()
        try:
            assignments = await self._client.fetch()
        except PodResourcesError as e:
            self.errors[e.kind] += 1
            self._failing = True
            self.answered = True  # no pods to name until it answers: nothing to wait for
            if self.source is not None:
                self.source.failed(str(e))
            held = self._log_limit.allow(e.kind)
            if held is not None:
                log.warning(
                    "pod-resources: %s; GPU series carry no pod labels until it answers (retrying)%s",
                    e,
                    left_out(held, self._log_limit.interval),
                )
            return
        except Exception as e:
            # what nobody expected (an answer the code cannot take): the task's supervisor logs it and starts it
            # again, and the source fails with what was wrong, so /health says so once the map is too old
            if self.source is not None:
                self.source.failed(f"List's answer could not be used ({type(e).__name__}: {e})")
            raise
        if self._failing:
            log.info("pod-resources answers again on %s", self._client.socket_path)
            self._failing = False
            self._log_limit.clear()
        self._map = PodMap(tuple(assignments), self._clock())
        self.answered = self.answered or complete
        if self.source is not None:
            self.source.succeeded()

    async def run(self) -> None:
        """Refresh until cancelled; what nobody expected ends it, for ``common/supervisor.py`` to start it again."""
        while True:
            await self.refresh_once()
            await asyncio.sleep(self._refresh)
