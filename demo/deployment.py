"""A Deployment the demo's HPAs scale: each replica a pod with a GPU of its own, taken from the free ones.

This does what Kubernetes does between a new replica count and the kubelet: the scheduler and the device plugin
give a new pod a free GPU, and the kubelet's pod-resources answer lists it; a pod that goes frees its GPU. Pods are
named ``trainer-0``, ``trainer-1``, ... (the lowest number free), and a scale-down removes the newest pods first,
as a ReplicaSet prefers to delete the pods that started last. A Deployment given ``max_replicas`` and no GPUs has
replicas that hold none (the chat engines on a machine with real GPUs, where they are simulated).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from demo.stack import Pod


@dataclass(frozen=True)
class Gpu:
    index: int  # NVML's index: the collector's ``gpu`` label
    uuid: str  # what the device plugin hands the pod


class Deployment:
    def __init__(
        self,
        name: str,
        gpus: Sequence[Gpu],
        apply: Callable[[list[Pod]], None],
        namespace: str = "",
        labels: Mapping[str, str] | None = None,
        max_replicas: int | None = None,
    ) -> None:
        """``gpus``: the ones free for this Deployment, a replica each; ``apply``: makes the pods the node's (stand-in
        API, kubelet); ``labels``: the pods' besides ``app``; ``max_replicas``: only for replicas without a GPU."""
        if max_replicas is not None and gpus:
            raise ValueError(f"{name}: replicas hold a GPU each or none, not both")
        self.name = name
        self.namespace = namespace
        self.labels = {"app": name}
        self._pod_labels = {**self.labels, **(labels or {})}
        self._gpus: list[Gpu | None] = list(gpus) if max_replicas is None else [None] * max_replicas
        self._apply = apply
        self._replicas: dict[str, Gpu | None] = {}  # pod name → its GPU, oldest first

    @property
    def replicas(self) -> int:
        return len(self._replicas)

    @property
    def capacity(self) -> int:
        """How many replicas the free GPUs (or ``max_replicas``) allow."""
        return len(self._gpus)

    @property
    def pods(self) -> dict[str, Gpu]:
        """The replicas that hold a GPU, and their GPUs."""
        return {name: gpu for name, gpu in self._replicas.items() if gpu is not None}

    @property
    def names(self) -> tuple[str, ...]:
        """Every replica, oldest first."""
        return tuple(self._replicas)

    def scale(self, replicas: int) -> None:
        if not 0 <= replicas <= self.capacity:
            raise ValueError(f"{self.name}: {replicas} replicas asked, {self.capacity} GPUs free")
        while len(self._replicas) > replicas:
            self._replicas.popitem()
        while len(self._replicas) < replicas:
            taken = set(self._replicas.values())
            gpu = next((g for g in self._gpus if g not in taken), None)
            number = next(n for n in range(self.capacity) if f"{self.name}-{n}" not in self._replicas)
            self._replicas[f"{self.name}-{number}"] = gpu
        self._apply(
            [
                Pod(name, self._pod_labels, () if gpu is None else (gpu.uuid,), namespace=self.namespace)
                for name, gpu in self._replicas.items()
            ]
        )
