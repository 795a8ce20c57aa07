"""NVLink: which links of a GPU are up, and DCGM's throughput fields, which are rates rather than NVML's counters.

NVML counts the data each link (or, with the scope ``0xFFFFFFFF``, the whole GPU) sent and received in KiB since the
driver loaded. DCGM's ``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`` and ``_L<n>`` are not those counters: DCGM adds both
directions, takes the difference to its previous reading, divides by the seconds between the two NVML timestamps and
by 1000 (``DcgmCacheManager::ReadAndCacheNvLinkBandwidth``), a whole number it labels MB/s. The same is done here, so
dashboards built on dcgm-exporter read the same numbers; the first reading only sets the baseline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from collector.nvml.api import Handle, Nvml
from collector.nvml.event_windows import Samples
from collector.nvml.fields import NVLINK_LINKS, NVLINK_TOTAL, Values, nvlink_field
from collector.nvml.readings import typed_value

ALL_LINKS = 0xFFFFFFFF  # NVML's scope for every link of the GPU together

# NVML's peer-to-peer statuses as dcgm-exporter names them in DCGM_EXP_P2P_STATUS's link_status label
P2P_STATUS = {
    0: "OK",
    1: "ChipsetNotSupported",
    2: "GPUNotSupported",
    3: "TopologyNotSupported",
    4: "DisabledByRegKey",
    5: "NotSupported",
    6: "Unknown",
}


def active_links(nvml: Nvml, handle: Handle) -> list[int]:
    """The links NVML reports enabled; none where the GPU has no NVLink (NotSupported, as on a PCIe H200)."""
    links = []
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) == nvml.NVML_FEATURE_ENABLED:
                links.append(link)
        except nvml.NVMLError:
            continue
    return links


class NvLinkThroughput:
    """DCGM's NVLink throughput of one GPU: the whole GPU and each of its active links, from two readings."""

    def __init__(
        self, nvml: Nvml, handle: Handle, links: Sequence[int], wall_clock: Callable[[], float] = time.time
    ) -> None:
        self._nvml = nvml
        self._handle = handle
        self._scopes = {NVLINK_TOTAL: ALL_LINKS, **{nvlink_field(n): n for n in links if n < NVLINK_LINKS}}
        self._wall_clock = wall_clock
        self._last: dict[int, tuple[int, int]] = {}  # scope → (KiB both ways, NVML's timestamp in µs)

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(self._scopes)

    def read(self, fields: frozenset[str]) -> Values | None:
        """The rate of each asked field since the previous reading; None on the first, which only sets the baseline."""
        nvml = self._nvml
        scopes = sorted({self._scopes[name] for name in fields if name in self._scopes})
        ids: list[int | tuple[int, int]] = []
        for scope in scopes:
            ids += [
                (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, scope),
                (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, scope),
            ]
        raw = nvml.nvmlDeviceGetFieldValues(self._handle, ids)
        now: dict[int, tuple[int, int]] = {}
        for scope, tx, rx in zip(scopes, raw[0::2], raw[1::2], strict=True):
            if tx.nvmlReturn == nvml.NVML_SUCCESS and rx.nvmlReturn == nvml.NVML_SUCCESS:
                stamp = max(int(tx.timestamp), int(rx.timestamp)) or int(self._wall_clock() * 1e6)
                now[scope] = (int(typed_value(tx.value, tx.valueType) + typed_value(rx.value, rx.valueType)), stamp)
        first = not self._last
        previous, self._last = self._last, {**self._last, **now}
        if first:
            return None
        out: Values = {}
        for name, scope in self._scopes.items():
            if name in fields and scope in now:
                # as DCGM: 0 where there is no earlier reading of this scope or no time has passed
                (kib, stamp), (kib0, stamp0) = now[scope], previous.get(scope, now[scope])
                seconds = (stamp - stamp0) / 1e6
                out[name] = float(int(max(0, kib - kib0) / seconds / 1000.0)) if seconds > 0 else 0.0
        return out


def p2p_samples(statuses: tuple[tuple[int, int], ...]) -> Samples:
    """dcgm-exporter's DCGM_EXP_P2P_STATUS of one GPU: per other GPU, the status as value and as a word."""
    return tuple(
        ((("peer_gpu", str(peer)), ("link_status", P2P_STATUS.get(status, "Unknown"))), float(status))
        for peer, status in statuses
    )
