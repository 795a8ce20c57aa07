"""Which pod a process belongs to, from ``/proc/<pid>/cgroup``.

The pod UID is part of the cgroup path on every layout the kubelet makes: cgroup v2 with the systemd driver
(``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope``),
v2 with cgroupfs (``/kubepods/burstable/pod<uid>/<id>``), and v1 (one such line per controller). A process outside
Kubernetes (``0::/system.slice/...``) belongs to no pod.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from collector.errors import ProcessGone

log = logging.getLogger(__name__)

_POD_UID = re.compile(r"pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})")


class CgroupReader:
    def __init__(self, proc_root: str = "/proc") -> None:
        self._root = Path(proc_root)
        self._reported: set[str] = set()
        self.errors = 0

    def pod_uid(self, pid: int) -> str | None:
        """The UID of the pod running ``pid``; None when it is not in a pod or its cgroup cannot be read."""
        try:
            text = (self._root / str(pid) / "cgroup").read_text()
        except (FileNotFoundError, ProcessLookupError) as e:
            raise ProcessGone(pid) from e
        except (OSError, UnicodeDecodeError) as e:
            self.errors += 1
            kind = type(e).__name__
            if kind not in self._reported:
                self._reported.add(kind)
                log.warning(
                    "cannot read %s (%s); processes whose cgroup cannot be read are not attributed to pods "
                    "(the collector needs hostPID and read access to /proc)",
                    self._root / str(pid) / "cgroup",
                    e,
                )
            return None
        return parse_pod_uid(text)


def parse_pod_uid(cgroup_text: str) -> str | None:
    for line in cgroup_text.splitlines():
        match = _POD_UID.search(line.rpartition(":")[2])
        if match:
            return match.group(1).replace("_", "-").lower()
    return None
