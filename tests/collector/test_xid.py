"""DCGM_FI_DEV_XID_ERRORS carries err_code and err_msg, as dcgm-exporter labels it."""

from collections.abc import Callable
from types import SimpleNamespace

import pynvml
import pytest

from collector.collection import Collection
from collector.nvml.api import EventData, EventSet
from collector.nvml.xid import xid_labels
from collector.simulation.nvml import SimulatedNvml


@pytest.mark.parametrize(
    ("value", "labels"),
    [
        (0.0, (("err_code", "0"), ("err_msg", "No Error"))),
        (13.0, (("err_code", "13"), ("err_msg", "Graphics Engine Exception"))),
        (79.0, (("err_code", "79"), ("err_msg", "GPU has fallen off the bus"))),
        (172.0, (("err_code", "172"), ("err_msg", "Uncorrectable SRAM Error"))),
        (173.0, (("err_code", "173"), ("err_msg", "Unknown Error"))),  # newer than the table
    ],
)
def test_labels_of_a_last_xid(value: float, labels: tuple[tuple[str, str], ...]) -> None:
    assert xid_labels(value) == labels


class XidOnGpu1(SimulatedNvml):
    """Simulated GPUs of which GPU 1 reports XID 79 once; NVML's wait then times out as it does when idle."""

    def __init__(self) -> None:
        super().__init__(2)
        self.pending = [79]

    def nvmlDeviceRegisterEvents(self, handle: object, types: int, event_set: EventSet) -> None:
        event_set.gpu = getattr(handle, "index", None)  # type: ignore[attr-defined]

    def nvmlEventSetWait(self, event_set: EventSet, timeout_ms: int) -> EventData:
        if getattr(event_set, "gpu", None) == 1 and self.pending:
            return SimpleNamespace(eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=self.pending.pop())
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)


def test_the_series_names_the_last_xid_of_each_gpu(make_collection: Callable[..., Collection]) -> None:
    collection = make_collection(XidOnGpu1())
    for _ in range(2):  # the XID stays the last one seen after the event was drained
        collection.run_once()
        xid = next(f for f in collection.latest.families if f.name == "DCGM_FI_DEV_XID_ERRORS")
        by_gpu = {dict(labels)["gpu"]: (dict(labels), value) for labels, value in xid.samples}
        assert by_gpu["1"][1] == 79
        assert (by_gpu["1"][0]["err_code"], by_gpu["1"][0]["err_msg"]) == ("79", "GPU has fallen off the bus")
        assert (by_gpu["0"][0]["err_code"], by_gpu["0"][0]["err_msg"], by_gpu["0"][1]) == ("0", "No Error", 0)
    collection.stop()
