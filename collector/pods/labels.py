"""A pod's Kubernetes labels as Prometheus labels, as dcgm-exporter's ``--kubernetes-enable-pod-labels`` gives them.

Names are sanitised as dcgm-exporter does (every character other than a letter, digit or underscore becomes ``_``:
``app.kubernetes.io/name`` → ``app_kubernetes_io_name``), so its users' queries keep working. Two departures, each
where dcgm-exporter would write an exposition Prometheus refuses: a name that would start with a digit (a label
prefix such as ``1password.com/``) gets a leading ``_``, and when two keys sanitise to the same name the first in
sorted order wins instead of whichever Go's map order gives.

A pod label may not take a name the collector gives a label of its own (``gpu``, ``UUID``, ``Hostname``, ``pod``,
``namespace``, ``container``, ``pod_uid``, ``hpc_job``, ``err_code``, a ``dra_*`` claim label, a ``DCGM_*`` label
field, dcgm-exporter 1.x's ``pod_name``...: ``RESERVED``): one series with a name twice makes Prometheus refuse the
node's whole scrape, where dcgm-exporter writes it anyway. Such a label is exported as ``label_<name>``, the prefix
kube-state-metrics gives every pod label (``label_pod``); a pod that also has a label named ``label_<name>`` keeps
its own, as two keys that sanitise alike do.

``--kubernetes-pod-label-allowlist-regex`` is a comma-separated list of regular expressions searched (unanchored, as
Go's ``MatchString``) in the label's key before sanitising; a key is kept when any matches; no list keeps every key.
They are RE2 expressions matched by the RE2 library (``google-re2``), as Go's ``regexp`` reads them; Python's ``re``
would read some differently (``[[:alpha:]]``) or refuse them (``\\pL``). An expression that does not compile stops the
start with an error naming it: dcgm-exporter skips it, and when none compiles exports every label, which on a busy
cluster multiplies series without warning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from common.flags import string_list

Labels = tuple[tuple[str, str], ...]


class Pattern(Protocol):
    pattern: str

    def search(self, text: str) -> Any: ...


_INVALID = re.compile(r"[^a-zA-Z0-9_]")
# the collector's own label names: a GPU's, a MIG instance's, the node's, a pod owner's, a field's own (XID, event
# windows, NVLink peers), and what -o and --hostname-label rename them to
RESERVED = frozenset({
    "gpu", "UUID", "uuid", "pci_bus_id", "device", "modelName", "GPU_I_ID", "GPU_I_PROFILE", "Hostname", "hostname",
    "pod", "namespace", "container", "pod_name", "pod_namespace", "container_name", "pod_uid", "hpc_job",
    "err_code", "err_msg", "xid", "clock_event", "window_size_in_ms", "peer_gpu", "link_status",
})  # fmt: skip
RESERVED_PREFIXES = ("dra_", "DCGM_")  # a DRA claim's labels; label fields (DCGM_FI_DRIVER_VERSION)
PREFIX = "label_"


def sanitize(key: str) -> str:
    name = _INVALID.sub("_", key)
    return f"_{name}" if name[:1].isdigit() else name


def series_name(key: str) -> str:
    """The label name a pod label's key becomes: sanitised, and prefixed where the collector has that name."""
    name = sanitize(key)
    return PREFIX + name if name in RESERVED or name.startswith(RESERVED_PREFIXES) else name


def parse_allowlist(text: str) -> tuple[Pattern, ...]:
    """The flag's value: comma-separated regular expressions (a Go string slice), each compiled now."""
    patterns = []
    if not text.strip():
        return ()
    import re2  # only when a list is given: the library costs ~1.7 MiB of resident memory

    options = re2.Options()
    options.log_errors = False  # RE2 would print a refused pattern to stderr too; the flag's error says it once
    for pattern in string_list(text):
        try:
            patterns.append(re2.compile(pattern, options))
        except re2.error as e:
            detail = e.args[0] if e.args else ""
            why = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
            raise ValueError(f"{pattern!r} is not a valid regular expression: {why}") from None
    return tuple(patterns)


class PodLabelFilter:
    """Which of a pod's labels become series labels, under which names; decided once per pod update, not per scrape."""

    def __init__(self, allowlist: Sequence[Pattern] = ()) -> None:
        self._allowlist = tuple(allowlist)

    def allows(self, key: str) -> bool:
        return not self._allowlist or any(p.search(key) for p in self._allowlist)

    def __call__(self, labels: Mapping[str, str]) -> Labels:
        out: dict[str, str] = {}
        for key in sorted(labels):
            if self.allows(key):
                out.setdefault(series_name(key), str(labels[key]))
        return tuple(out.items())
