"""Record the NVML calls a reader makes on a real GPU, and replay them as a fake ``pynvml`` module.

``RecordingNvml`` wraps the real module: every ``nvml*`` call goes through, and its arguments, result or error code
are appended to a trace. ``ReplayNvml`` answers the same calls from that trace, phase by phase (``idle``,
``gemm``, ``shared`` ...), so tests see exactly what the H200 said, NotSupported answers included. Tests can
also inject failures per call and GPU.

Handles, event sets and GPM samples are pointers on the real side; the trace names them (``gpu0``, ``events``,
``sample``) so a replay does not depend on addresses.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

from collector.simulation.nvml import GpmMetricsRequest

TRACE_DIR = Path(__file__).parent / "traces"

# Calls whose numbers only grow on a real GPU: replay adds the recorded steps, so looping never goes backwards.
MONOTONIC = {
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetTotalEccErrors",
}
# Arguments that change on every call and must not be part of the lookup key.
_VOLATILE_ARGS = {
    "nvmlDeviceGetProcessUtilization": 1,
    "nvmlDeviceGetProcessesUtilizationInfo": 1,
    "nvmlDeviceGetSamples": 2,
}


def _address(obj: Any) -> int | None:
    """What identifies a handle-like object: its pointer value, or for plain Python stand-ins its id()."""
    if isinstance(obj, SimpleNamespace):
        return id(obj)
    try:
        return ctypes.cast(obj, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def encode(obj: Any) -> Any:
    """A JSON-ready copy of an NVML result: structures become dicts of their fields, arrays lists."""
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, bytes):
        return obj.decode(errors="replace")
    if isinstance(obj, ctypes.Structure | ctypes.Union):
        return {name: encode(getattr(obj, name)) for name, *_ in obj._fields_}
    if isinstance(obj, ctypes.Array | list | tuple):
        return [encode(x) for x in obj]
    if isinstance(obj, ctypes._Pointer):
        return "<pointer>"
    if isinstance(obj, SimpleNamespace):
        return {k: encode(v) for k, v in vars(obj).items()}
    if hasattr(obj, "value"):
        return encode(obj.value)
    if hasattr(obj, "__dict__"):  # pynvml's nvmlFriendlyObject (process lists)
        return {k: encode(v) for k, v in vars(obj).items()}
    return repr(obj)


def decode(obj: Any) -> Any:
    """Recorded dicts back as attribute objects, so code reads ``result.gpu`` as it would from pynvml."""
    if isinstance(obj, dict):
        return SimpleNamespace(**{k: decode(v) for k, v in obj.items()})
    if isinstance(obj, list):
        return [decode(x) for x in obj]
    return obj


class RecordingNvml:
    def __init__(self, real: Any) -> None:
        self._real = real
        self.phase = "init"
        self.calls: list[dict[str, Any]] = []
        self._names: dict[int, str] = {}
        self._sample_gpu: dict[int, str] = {}
        self._t0 = time.monotonic()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._real, name)
        if not (name.startswith("nvml") and callable(value) and not isinstance(value, type)):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            key = self._key(name, args, kwargs)
            entry: dict[str, Any] = {"call": name, "args": key, "phase": self.phase}
            entry["t"] = round(time.monotonic() - self._t0, 4)
            try:
                result = value(*args, **kwargs)
            except self._real.NVMLError as e:
                entry["error"] = e.value
                self.calls.append(entry)
                raise
            entry["result"] = self._result(name, args, result)
            self.calls.append(entry)
            return result

        return call

    def _name_of(self, obj: Any) -> Any:
        address = _address(obj)
        if address is not None and address in self._names:
            return self._names[address]
        if isinstance(obj, ctypes.Structure):
            return "<struct>"
        return encode(obj)

    def _key(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        if name == "nvmlGpmMetricsGet":
            request = args[0]
            ids = [request.metrics[i].metricId for i in range(request.numMetrics)]
            return [self._sample_gpu.get(_address(request.sample2) or 0, "?"), ids]
        key = [self._name_of(a) for a in args]
        if name in _VOLATILE_ARGS:
            del key[_VOLATILE_ARGS[name]]
        if name == "nvmlGpmSampleGet":
            self._sample_gpu[_address(args[1]) or 0] = key[0]
        if name == "nvmlGpmMigSampleGet":
            self._sample_gpu[_address(args[2]) or 0] = f"{key[0]}/gi{args[1]}"
        key += [[k, encode(v)] for k, v in sorted(kwargs.items())]
        return key

    def _result(self, name: str, args: tuple[Any, ...], result: Any) -> Any:
        if name == "nvmlDeviceGetHandleByIndex":
            self._names[_address(result) or 0] = f"gpu{args[0]}"
            return f"gpu{args[0]}"
        if name == "nvmlDeviceGetMigDeviceHandleByIndex":
            label = f"{self._name_of(args[0])}/mig{args[1]}"
            self._names[_address(result) or 0] = label
            return label
        if name == "nvmlEventSetCreate":
            self._names[_address(result) or 0] = "events"
            return "events"
        if name == "nvmlGpmSampleAlloc":
            self._names[_address(result) or 0] = "sample"
            return "sample"
        if name == "nvmlGpmMetricsGet":
            return [
                {"metricId": m.metricId, "nvmlReturn": m.nvmlReturn, "value": m.value}
                for m in result.metrics[: result.numMetrics]
            ]
        if name in ("nvmlGpmSampleGet", "nvmlGpmMigSampleGet"):
            return "sample"
        return encode(result)

    def save(self, path: Path, meta: dict[str, Any]) -> None:
        path.write_text(json.dumps({"meta": meta, "calls": self.calls}, indent=None, separators=(",", ":")))


class _Token(SimpleNamespace):
    """A handle, event set or GPM sample on the replay side."""


class ReplayNvml:
    """A ``pynvml`` stand-in answering from a recorded trace; unknown calls raise FunctionNotFound, as NVML would."""

    c_nvmlGpmMetricsGet_t = GpmMetricsRequest

    def __init__(self, trace: dict[str, Any], phase: str = "idle", gpus: int | None = None) -> None:
        """``gpus`` above the recorded count makes copies of the recorded GPU 0 (with UUIDs of their own)."""
        self.meta: dict[str, Any] = trace["meta"]
        self.gpus = gpus
        self._outcomes: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
        # every recorded outcome of a call, whatever its phase, in recording order
        self._in_order: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        # every recorded value of one field (and scope) on one GPU, whatever else its call asked: fields are
        # answered one by one, so a reader asking them in other groupings still gets what the GPU said
        self._field_values: dict[tuple[str, str, int, int], list[dict[str, Any]]] = defaultdict(list)
        for entry in trace["calls"]:
            self._outcomes[(entry["phase"], entry["call"], json.dumps(entry["args"]))].append(entry)
            self._in_order[(entry["call"], json.dumps(entry["args"]))].append(entry)
            if entry["call"] == "nvmlDeviceGetFieldValues" and "result" in entry:
                for value in entry["result"]:
                    key = (entry["phase"], entry["args"][0], value["fieldId"], value.get("scopeId", 0))
                    self._field_values[key].append(value)
        self.phase = phase
        self._cursor: dict[tuple[str, str, str], int] = defaultdict(int)
        self._last: dict[tuple[str, str], float] = {}
        self._faults: list[tuple[str, str | None, int, Callable[[], bool]]] = []
        self.calls: list[str] = []
        self.initialised = False

    @classmethod
    def load(cls, name: str = "h200", phase: str = "idle", gpus: int | None = None) -> ReplayNvml:
        return cls(json.loads((TRACE_DIR / f"{name}.json").read_text()), phase, gpus)

    def recorded(self, call: str, *args: Any) -> Any:
        """What the GPU first answered to ``call(*args)`` (handles named "gpu0"), without advancing the replay."""
        for (_phase, name, key), outcomes in self._outcomes.items():
            if name == call and json.loads(key) == list(args) and "result" in outcomes[0]:
                return decode(outcomes[0]["result"])
        raise KeyError(f"{call}{args} was not recorded")

    def recorded_in_phase(self, call: str, *args: Any) -> list[Any]:
        """Every answer to ``call(*args)`` recorded in the current phase, in order, without advancing the replay."""
        outcomes = self._outcomes.get((self.phase, call, json.dumps(list(args))), [])
        return [decode(o["result"]) for o in outcomes if "result" in o]

    # -- fault injection -------------------------------------------------------------------------------------

    def fail(self, call: str, code: int, gpu: str | None = None, times: int | None = None) -> None:
        """Make ``call`` (on ``gpu``, e.g. "gpu1", or on every GPU) raise NVMLError(code), ``times`` times or always."""
        counter = itertools.count()
        self._faults.append((call, gpu, code, lambda: times is None or next(counter) < times))

    def clear_faults(self) -> None:
        self._faults.clear()

    # -- the pynvml surface ----------------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        value = getattr(pynvml, name)
        if not (name.startswith("nvml") and callable(value) and not isinstance(value, type)):
            return value
        return lambda *args, **kwargs: self._call(name, args, kwargs)

    def _arg(self, obj: Any) -> Any:
        return obj.name if isinstance(obj, _Token) else encode(obj)

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.calls.append(name)
        first_gpu = args[0].name if args and isinstance(args[0], _Token) else None
        for call, gpu, code, active in self._faults:
            if call == name and (gpu is None or gpu == first_gpu) and active():
                raise pynvml.NVMLError(code)
        if name == "nvmlInit":
            self.initialised = True
        if name == "nvmlGpmSampleAlloc":
            return _Token(name="sample", gpu=None)
        if name == "nvmlEventSetCreate":
            return _Token(name="events")
        if name in ("nvmlGpmSampleGet", "nvmlGpmMigSampleGet"):
            sample = args[-1]
            sample.gpu = args[0].name if name == "nvmlGpmSampleGet" else f"{args[0].name}/gi{args[1]}"
        if name == "nvmlGpmMetricsGet":
            return self._metrics_get(args[0])
        if name == "nvmlDeviceGetFieldValues":
            return self._get_field_values(args[0].name, args[1])
        if self.gpus is not None:
            if name == "nvmlDeviceGetCount":
                return self.gpus
            if name == "nvmlDeviceGetHandleByIndex":
                if not 0 <= args[0] < self.gpus:
                    raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
                return _Token(name=f"gpu{args[0]}")
        key = [self._arg(a) for a in args]
        clone = key[0] if key and isinstance(key[0], str) and key[0].startswith("gpu") else None
        if clone is not None:
            key[0] = "gpu0" + clone[clone.index("/") :] if "/" in clone else "gpu0"
        if name in _VOLATILE_ARGS:
            del key[_VOLATILE_ARGS[name]]
        key += [[k, encode(v)] for k, v in sorted(kwargs.items())]
        entry, loop = self._next((self.phase, name, json.dumps(key)))
        if "error" in entry:
            raise pynvml.NVMLError(entry["error"])
        result = entry["result"]
        if name == "nvmlDeviceGetSamples" and loop:
            result = self._later_samples(entry, result, loop)
        if clone not in (None, "gpu0") and name in ("nvmlDeviceGetUUID", "nvmlDeviceGetMinorNumber"):
            n = int(clone.split("/")[0][3:])
            return f"{result[:-2]}{n:02d}" if name == "nvmlDeviceGetUUID" else n
        if clone not in (None, "gpu0") and name == "nvmlDeviceGetPciInfo":
            n = int(clone.split("/")[0][3:])
            return decode({**result, "busId": f"00000000:{0x19 + n:02X}:00.0"})
        if name in ("nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMigDeviceHandleByIndex"):
            return _Token(name=result)
        if name in MONOTONIC:
            return self._monotonic((name, json.dumps([clone, *key])), entry, result)
        return decode(result)

    def _get_field_values(self, gpu: str, requested: list[Any]) -> list[Any]:
        """Each field as the GPU answered it in this phase (in turn); one never recorded answers FunctionNotFound
        in its own slot, as the rest of the replay answers a call it never saw."""
        if self.gpus is not None:
            gpu = "gpu0" + (gpu[gpu.index("/") :] if "/" in gpu else "")
        out = []
        for item in requested:
            field_id, scope = item if isinstance(item, tuple | list) else (item, 0)
            values: list[dict[str, Any]] = []
            for phase in (self.phase, "init", "idle", "gemm", "half", "quarter_slow", "shared"):
                key = (phase, gpu, field_id, scope)
                values = self._field_values.get(key, [])
                if values:
                    break
            if not values:
                zeros = dict.fromkeys(["uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal"], 0)
                out.append(decode({"fieldId": field_id, "scopeId": scope, "timestamp": 0, "latencyUsec": 0,
                                   "valueType": 0, "nvmlReturn": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                                   "value": {"dVal": 0.0, **zeros}}))  # fmt: skip
                continue
            cursor = ("field", *map(str, key))
            i = self._cursor[cursor]  # type: ignore[index]
            self._cursor[cursor] = i + 1  # type: ignore[index]
            out.append(decode(values[i % len(values)]))
        return out

    def _next(self, key: tuple[str, str, str]) -> tuple[dict[str, Any], int]:
        """The next recorded outcome of a call, and how many times its recording has been replayed whole before."""
        outcomes = self._outcomes.get(key)
        if not outcomes:
            # A phase may not have recorded every call (identity calls happen once, at start): fall back to any.
            for phase in ("init", "idle", "gemm", "half", "quarter_slow", "shared"):
                outcomes = self._outcomes.get((phase, *key[1:]))
                if outcomes:
                    key = (phase, *key[1:])
                    break
        if not outcomes:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        i = self._cursor[key]
        self._cursor[key] = i + 1
        return outcomes[i % len(outcomes)], i // len(outcomes)

    def _later_samples(self, entry: dict[str, Any], result: list[Any], loop: int) -> list[Any]:
        """Utilization samples replayed again, moved later by the recording's span, as a running GPU's would be."""
        outcomes = self._outcomes[(entry["phase"], entry["call"], json.dumps(entry["args"]))]
        newest = [max(s["timeStamp"] for s in o["result"][1]) for o in outcomes if o.get("result")]
        shift = loop * (newest[-1] - newest[0])
        value_type, samples = result
        return [value_type, [{**s, "timeStamp": s["timeStamp"] + shift} for s in samples]]

    def _monotonic(self, key: tuple[str, str], entry: dict[str, Any], result: float) -> float:
        # the counter's growth since the call's previous recording, in any phase: a phase recorded once (slow fields
        # are read every tenth cycle) still advances the counter when it is replayed
        outcomes = self._in_order[(entry["call"], json.dumps(entry["args"]))]
        i = next(n for n, o in enumerate(outcomes) if o is entry)
        step = result - outcomes[i - 1]["result"] if i > 0 else 0
        value = self._last.get(key, result) + max(0, step)
        self._last[key] = value
        return value

    def _metrics_get(self, request: Any) -> Any:
        ids = [request.metrics[i].metricId for i in range(request.numMetrics)]
        gpu = request.sample2.gpu
        if self.gpus is not None:
            gpu = "gpu0" + (gpu[gpu.index("/") :] if "/" in gpu else "")
        recorded = [
            e
            for k, v in self._outcomes.items()
            if k[0] == self.phase and k[1] == "nvmlGpmMetricsGet"
            for e in v
            if e["args"][0] == gpu
        ]
        if not recorded:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        key = (self.phase, "nvmlGpmMetricsGet", gpu)
        i = self._cursor[key]
        self._cursor[key] = i + 1
        by_id = {m["metricId"]: m for m in recorded[i % len(recorded)]["result"]}
        for slot, metric_id in zip(request.metrics, ids, strict=False):
            m = by_id.get(metric_id)
            slot.nvmlReturn = m["nvmlReturn"] if m else pynvml.NVML_ERROR_NOT_SUPPORTED
            slot.value = m["value"] if m else 0.0
        return request
