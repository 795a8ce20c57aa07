"""Record the NVML trace the tests replay. Run on a machine with a real GPU (not in CI):

    python -m harness.node.record_trace harness/node/traces/h200.json

Phases: ``init`` (start and enumeration), ``idle``, ``gemm`` (a bf16 GEMM loop), ``half`` and ``quarter_slow``
(the loop at duty 0.5 of a 0.2 s period and 0.25 of a 1 s period; NVML's point value is recorded beside the
samples the reader averages), ``shared`` (two processes on the GPU at duty cycles 0.9 and 0.2, process utilization
polled at 5 Hz as the shared-GPU attribution does).
"""

from __future__ import annotations

import contextlib
import datetime
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import pynvml

from collector.nvml.fields import FIELDS, LABEL_FIELDS
from collector.nvml.reader import NvmlReader
from harness.node.nvml_trace import RecordingNvml

ALL_FIELDS = frozenset(FIELDS)
ALL_LABELS = tuple(sorted(LABEL_FIELDS))  # read once per GPU, so recorded in the first phase that reads


def load(kind: str, seconds: float, duty: float, period: float = 0.1) -> subprocess.Popen[bytes]:
    args = ["--kind", kind, "--seconds", str(seconds), "--duty", str(duty), "--period", str(period)]
    return subprocess.Popen(
        [sys.executable, "-m", "loadgen", "run", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def poll_processes(rec: Any, handles: list[Any], last_seen: dict[int, int]) -> None:
    for i, handle in enumerate(handles):
        try:
            samples = rec.nvmlDeviceGetProcessUtilization(handle, last_seen.get(i, 0))
            if samples:
                last_seen[i] = max(s.timeStamp for s in samples)
        except pynvml.NVMLError:
            pass


def cycles(rec: Any, reader: NvmlReader, handles: list[Any], seconds: float, poll_hz: float) -> None:
    last_seen: dict[int, int] = {}
    deadline, next_read = time.monotonic() + seconds, 0.0
    while time.monotonic() < deadline:
        now = time.monotonic()
        if now >= next_read:
            reader.read(ALL_FIELDS, ALL_LABELS)
            for handle in handles:
                # what dcgm-exporter reads, kept beside the sampled mean the reader now exports
                with contextlib.suppress(pynvml.NVMLError):
                    rec.nvmlDeviceGetUtilizationRates(handle)
                with contextlib.suppress(pynvml.NVMLError):
                    rec.nvmlDeviceGetComputeRunningProcesses(handle)
            next_read = now + 1.0
        poll_processes(rec, handles, last_seen)
        time.sleep(1.0 / poll_hz)


def wait_for_load(handles: list[Any], timeout: float = 60.0, busy: int = 50) -> None:
    """Wait, outside the recording, until the GPU is busy: starting PyTorch and CUDA takes several seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # the newest samples, not the point value: that one can read 0 all along under a duty-cycled load
        _, samples = pynvml.nvmlDeviceGetSamples(handles[0], pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
        if max(s.sampleValue.uiVal for s in samples[-5:]) >= busy:
            return
        time.sleep(0.1)


def main(out: Path) -> None:
    rec = RecordingNvml(pynvml)
    reader = NvmlReader(rec)
    try:
        record(rec, reader, out)
    except Exception:
        traceback.print_exc()  # keep what was recorded so far: device time is scarce
        rec.save(out.with_suffix(".partial.json"), {"error": traceback.format_exc()})
        raise


def record(rec: RecordingNvml, reader: NvmlReader, out: Path) -> None:
    rec.phase = "init"
    reader.open()
    handles = [rec.nvmlDeviceGetHandleByIndex(i) for i in range(len(reader.gpus))]
    rec.phase = "idle"
    cycles(rec, reader, handles, 6, poll_hz=5)

    gemm = load("gemm-bf16", 24, 1.0)
    wait_for_load(handles)
    rec.phase = "ramp"
    cycles(rec, reader, handles, 3, poll_hz=5)
    rec.phase = "gemm"
    cycles(rec, reader, handles, 8, poll_hz=5)
    gemm.wait()

    # Partial loads, where a point sample aliases with the load's period: half of every 0.2 s, then the first
    # quarter of every second.
    for phase, duty, period in (("half", 0.5, 0.2), ("quarter_slow", 0.25, 1.0)):
        partial = load("gemm-bf16", 18, duty, period)
        wait_for_load(handles, busy=5)
        time.sleep(2)
        rec.phase = "ramp"
        cycles(rec, reader, handles, 2, poll_hz=5)
        rec.phase = phase
        cycles(rec, reader, handles, 10, poll_hz=5)
        partial.wait()

    # A 1 s duty period: NVML gives each ~200 ms sample window to the process that held the GPU most in it, so
    # finer interleaving would credit nearly every window to the heavier process (seen with a 0.1 s period).
    heavy, light = load("gemm-bf16", 35, 0.9, 1.0), load("gemm-bf16", 35, 0.2, 1.0)
    wait_for_load(handles)
    time.sleep(3)  # both processes running: the light one may start later than the heavy one
    rec.phase = "ramp"
    cycles(rec, reader, handles, 3, poll_hz=5)
    rec.phase = "shared"
    cycles(rec, reader, handles, 14, poll_hz=5)
    heavy.wait()
    light.wait()
    rec.phase = "after"
    gpus = [g.model for g in reader.gpus]
    reader.close()

    rec.calls = [c for c in rec.calls if c["phase"] not in ("ramp", "after")]
    meta = {
        "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "driver": reader.driver_version,
        "gpus": gpus,
        "nvml_py": getattr(pynvml, "__version__", "?"),
        "shared_pids": {"heavy_duty_0.9": heavy.pid, "light_duty_0.2": light.pid},
        "phases": "idle 6 s; gemm 8 s (bf16 8192^2 loop at full load); "
        "half 10 s (the same loop busy 0.5 of every 0.2 s); quarter_slow 10 s (busy 0.25 of every 1 s); "
        "shared 14 s (two processes at duty 0.9 and 0.2 of a 1 s period)",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    rec.save(out, meta)
    print(f"wrote {len(rec.calls)} calls to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
