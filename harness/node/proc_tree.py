"""A stand-in /proc with ``<pid>/cgroup`` files in every layout the kubelet makes (demo and tests)."""

from __future__ import annotations

from pathlib import Path


def v2_systemd(uid: str, qos: str = "burstable") -> str:
    pod = f"kubepods-{qos}-pod{uid.replace('-', '_')}.slice"
    return f"0::/kubepods.slice/kubepods-{qos}.slice/{pod}/cri-containerd-abc.scope\n"


def v2_cgroupfs(uid: str) -> str:
    return f"0::/kubepods/besteffort/pod{uid}/0123456789abcdef\n"


def v1(uid: str) -> str:
    controllers = ["cpuset", "cpu,cpuacct", "memory", "devices", "pids"]
    lines = [f"{i + 2}:{c}:/kubepods/burstable/pod{uid}/fedcba9876543210" for i, c in enumerate(controllers)]
    return "12:rdma:/\n" + "\n".join(lines) + "\n1:name=systemd:/kubepods/burstable/pod" + uid + "/fedcba\n"


def outside_kubernetes() -> str:
    return "0::/system.slice/containerd.service\n"


class ProcTree:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def add(self, pid: int, cgroup: str) -> None:
        (self.root / str(pid)).mkdir(exist_ok=True)
        (self.root / str(pid) / "cgroup").write_text(cgroup)

    def remove(self, pid: int) -> None:
        (self.root / str(pid) / "cgroup").unlink()
        (self.root / str(pid)).rmdir()
