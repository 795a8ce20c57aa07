"""Where a collection cycle's CPU goes: each NVML call alone, then the reader call by call and stage by stage.

Part 1 (calls) times every NVML call the collector can make, ``--repeat`` times in a row on GPU 0, and prints the
median CPU time (the thread's user + system time: NVML's ioctls are CPU the node pays) and wall time of one call.
Part 2 (cycles) runs the collector's own reader with NVML behind a timing proxy for ``--cycles`` cycles at the
collection interval, for the built-in counters and for every field dcgm-exporter's default file lists, and prints
per cycle: each NVML function's calls and CPU, and each stage's CPU (NVML reads, series, families, text).

    python -m bench.nvml_costs [--repeat 50] [--cycles 20] [--interval 1.0] [--simulate N]

``--simulate N`` runs the same on simulated GPUs (the collector's own Python work, no driver).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from collector.counters.file import Counters, parse
from collector.counters.file import load as load_counters
from collector.exposition import render_text
from collector.nvml.fields import GPM_METRICS
from collector.nvml.reader import NvmlReader
from collector.series import device_series, gpu_families
from collector.settings import Settings

# The fields dcgm-exporter's etc/default-counters.csv names, those it enables and those it leaves commented out,
# as (field, type); a field only DCGM's host engine gives (its health status) is left out, as the collector warns.
DCGM_EXPORTER_DEFAULT_FILE = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge"),
    ("DCGM_EXP_CLOCK_EVENTS_COUNT", "gauge"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge"),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge"),
    ("DCGM_EXP_XID_ERRORS_COUNT", "gauge"),
    ("DCGM_FI_DEV_FB_FREE", "gauge"),
    ("DCGM_FI_DEV_FB_USED", "gauge"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge"),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter"),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter"),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter"),
    ("DCGM_FI_DEV_RETIRED_SBE", "counter"),
    ("DCGM_FI_DEV_RETIRED_DBE", "counter"),
    ("DCGM_FI_DEV_RETIRED_PENDING", "counter"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge"),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter"),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter"),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter"),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_L0", "counter"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "gauge"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge"),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge"),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge"),
    ("DCGM_EXP_P2P_STATUS", "gauge"),
    ("DCGM_FI_DRIVER_VERSION", "label"),
    ("DCGM_FI_NVML_VERSION", "label"),
    ("DCGM_FI_DEV_BRAND", "label"),
    ("DCGM_FI_DEV_SERIAL", "label"),
    ("DCGM_FI_DEV_VBIOS_VERSION", "label"),
    ("DCGM_FI_DEV_INFOROM_IMAGE_VER", "label"),
    ("DCGM_FI_DEV_OEM_INFOROM_VER", "label"),
    ("DCGM_FI_DEV_ECC_INFOROM_VER", "label"),
    ("DCGM_FI_DEV_POWER_INFOROM_VER", "label"),
]


def dcgm_exporter_default_file() -> Counters:
    return parse("\n".join(f"{name}, {kind}, {name}" for name, kind in DCGM_EXPORTER_DEFAULT_FILE), "default-file")


@dataclass
class Cost:
    calls: int = 0
    cpu: float = 0.0
    wall: float = 0.0


@dataclass
class TimedNvml:
    """NVML behind a proxy that adds each ``nvml*`` call's CPU and wall time to ``costs`` (by function name)."""

    nvml: Any
    costs: defaultdict[str, Cost] = field(default_factory=lambda: defaultdict(Cost))

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.nvml, name)
        if not (name.startswith("nvml") and callable(target)):
            return target
        costs = self.costs

        def timed(*args: Any, **kwargs: Any) -> Any:
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return target(*args, **kwargs)
            finally:
                cost = costs[name]
                cost.calls += 1
                cost.cpu += time.thread_time() - cpu
                cost.wall += time.perf_counter() - wall

        return timed


def single_call_samples(nvml: Any) -> Callable[[Any, int, int], Any]:
    """``nvmlDeviceGetSamples`` in one C call into a buffer sized once, where pynvml makes two (size, then data)."""
    fn = nvml._nvmlGetFunctionPointer("nvmlDeviceGetSamples")
    buffers: dict[int, Any] = {}

    def call(handle: Any, sampling: int, after: int) -> Any:
        count = ctypes.c_uint(0)
        kind = ctypes.c_int(0)
        if sampling not in buffers:
            nvml._nvmlCheckReturn(
                fn(handle, sampling, ctypes.c_ulonglong(0), ctypes.byref(kind), ctypes.byref(count), None)
            )
            buffers[sampling] = (count.value * nvml.c_nvmlSample_t)()
        buffer = buffers[sampling]
        count.value = len(buffer)
        ret = fn(handle, sampling, ctypes.c_ulonglong(after), ctypes.byref(kind), ctypes.byref(count), buffer)
        if ret == nvml.NVML_ERROR_NOT_FOUND:
            return 0
        nvml._nvmlCheckReturn(ret)
        return count.value

    return call


def call_table(nvml: Any, repeat: int) -> list[tuple[str, str, float, float, str]]:
    """(call, what, median CPU ms, median wall ms, outcome) for each NVML call on GPU 0."""
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    newest = {}
    for kind in ("GPU_UTILIZATION_SAMPLES", "MEMORY_UTILIZATION_SAMPLES", "ENC_UTILIZATION_SAMPLES"):
        try:
            _t, samples = nvml.nvmlDeviceGetSamples(h, getattr(nvml, f"NVML_{kind}"), 0)
            newest[kind] = max((int(s.timeStamp) for s in samples), default=0)
        except nvml.NVMLError:
            newest[kind] = 0
    one_call = single_call_samples(nvml)
    gpm = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
    nvml.nvmlGpmSampleGet(h, gpm[0])
    time.sleep(0.2)
    nvml.nvmlGpmSampleGet(h, gpm[1])
    graphics = [nvml.NVML_GPM_METRIC_GRAPHICS_UTIL]
    others = [getattr(nvml, m) for m, _ in GPM_METRICS.values() if m != "NVML_GPM_METRIC_GRAPHICS_UTIL"]

    def metrics(ids: list[int]) -> Any:
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(ids)
        request.sample1, request.sample2 = gpm
        for i, metric in enumerate(ids):
            request.metrics[i].metricId = metric
        return nvml.nvmlGpmMetricsGet(request)

    fv = nvml.NVML_FI_DEV_MEMORY_TEMP
    eight = [
        nvml.NVML_FI_DEV_MEMORY_TEMP,
        nvml.NVML_FI_DEV_PERF_POLICY_POWER,
        nvml.NVML_FI_DEV_PERF_POLICY_THERMAL,
        nvml.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST,
        nvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT,
        nvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION,
        nvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY,
        nvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
    ]
    gpu_s, enc_s = nvml.NVML_GPU_UTILIZATION_SAMPLES, nvml.NVML_ENC_UTILIZATION_SAMPLES
    calls: list[tuple[str, str, Callable[[], Any]]] = [
        ("nvmlDeviceGetUtilizationRates", "point", lambda: nvml.nvmlDeviceGetUtilizationRates(h)),
        ("nvmlDeviceGetSamples", "GPU, all (pynvml: 2 C calls)", lambda: nvml.nvmlDeviceGetSamples(h, gpu_s, 0)),
        (
            "nvmlDeviceGetSamples",
            "GPU, newer than the newest (pynvml)",
            lambda: _quiet(nvml, lambda: nvml.nvmlDeviceGetSamples(h, gpu_s, newest["GPU_UTILIZATION_SAMPLES"])),
        ),
        ("nvmlDeviceGetSamples", "GPU, all, 1 C call", lambda: one_call(h, gpu_s, 0)),
        (
            "nvmlDeviceGetSamples",
            "GPU, newer than the newest, 1 C call",
            lambda: one_call(h, gpu_s, newest["GPU_UTILIZATION_SAMPLES"]),
        ),
        ("nvmlDeviceGetSamples", "ENC, all (pynvml)", lambda: nvml.nvmlDeviceGetSamples(h, enc_s, 0)),
        ("nvmlDeviceGetEncoderUtilization", "point", lambda: nvml.nvmlDeviceGetEncoderUtilization(h)),
        ("nvmlDeviceGetDecoderUtilization", "point", lambda: nvml.nvmlDeviceGetDecoderUtilization(h)),
        ("nvmlDeviceGetMemoryInfo", "v2", lambda: nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2)),
        ("nvmlDeviceGetPowerUsage", "", lambda: nvml.nvmlDeviceGetPowerUsage(h)),
        ("nvmlDeviceGetTotalEnergyConsumption", "", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h)),
        ("nvmlDeviceGetPowerManagementLimit", "", lambda: nvml.nvmlDeviceGetPowerManagementLimit(h)),
        ("nvmlDeviceGetTemperature", "GPU", lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
        ("nvmlDeviceGetClockInfo", "SM", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
        ("nvmlDeviceGetClockInfo", "MEM", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
        ("nvmlDeviceGetFanSpeed", "", lambda: nvml.nvmlDeviceGetFanSpeed(h)),
        ("nvmlDeviceGetPcieReplayCounter", "", lambda: nvml.nvmlDeviceGetPcieReplayCounter(h)),
        ("nvmlDeviceGetRemappedRows", "", lambda: nvml.nvmlDeviceGetRemappedRows(h)),
        (
            "nvmlDeviceGetTotalEccErrors",
            "one of 4",
            lambda: nvml.nvmlDeviceGetTotalEccErrors(h, nvml.NVML_SINGLE_BIT_ECC, nvml.NVML_VOLATILE_ECC),
        ),
        ("nvmlDeviceGetCurrentClocksEventReasons", "", lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(h)),
        ("nvmlDeviceGetPerformanceState", "", lambda: nvml.nvmlDeviceGetPerformanceState(h)),
        ("nvmlDeviceGetFieldValues", "1 field (memory temp)", lambda: nvml.nvmlDeviceGetFieldValues(h, [fv])),
        ("nvmlDeviceGetFieldValues", "8 fields", lambda: nvml.nvmlDeviceGetFieldValues(h, eight)),
        (
            "nvmlDeviceGetFieldValues",
            "energy alone",
            lambda: nvml.nvmlDeviceGetFieldValues(h, [nvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION]),
        ),
        (
            "nvmlDeviceGetFieldValues",
            "7 fields, no energy",
            lambda: nvml.nvmlDeviceGetFieldValues(h, eight[:7]),
        ),
        ("nvmlGpmMetricsGet", "GRAPHICS_UTIL alone", lambda: metrics(graphics)),
        ("nvmlGpmMetricsGet", f"the {len(others)} other metrics served", lambda: metrics(others)),
        ("nvmlGpmSampleGet", "", lambda: nvml.nvmlGpmSampleGet(h, gpm[0])),
        ("nvmlDeviceGetComputeRunningProcesses", "", lambda: nvml.nvmlDeviceGetComputeRunningProcesses(h)),
        (
            "nvmlDeviceGetProcessUtilization",
            "",
            lambda: _quiet(nvml, lambda: nvml.nvmlDeviceGetProcessUtilization(h, 0)),
        ),
        ("nvmlDeviceGetGridLicensableFeatures", "", lambda: nvml.nvmlDeviceGetGridLicensableFeatures(h)),
        (
            "nvmlDeviceGetPcieThroughput",
            "TX",
            lambda: nvml.nvmlDeviceGetPcieThroughput(h, nvml.NVML_PCIE_UTIL_TX_BYTES),
        ),
    ]
    rows = []
    for name, what, call in calls:
        cpu_times, wall_times, outcome = [], [], "ok"
        for _ in range(repeat if "Pcie" not in name else max(5, repeat // 10)):
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                call()
            except nvml.NVMLError as e:
                outcome = type(e).__name__.removeprefix("NVMLError_")
            cpu_times.append(time.thread_time() - cpu)
            wall_times.append(time.perf_counter() - wall)
        rows.append((name, what, 1e3 * statistics.median(cpu_times), 1e3 * statistics.median(wall_times), outcome))
    for sample in gpm:
        nvml.nvmlGpmSampleFree(sample)
    return rows


def _quiet(nvml: Any, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except nvml.NVMLError as e:
        if e.value != nvml.NVML_ERROR_NOT_FOUND:
            raise
        return None


@dataclass
class Cycles:
    nvml: dict[str, Cost]
    stages: dict[str, float]
    cycles: int
    series: int


def run_cycles(nvml: Any, counters: Counters, cycles: int, interval: float) -> Cycles:
    timed = TimedNvml(nvml)
    defaults = Settings()  # the collector's own cadences, as deployed
    reader = NvmlReader(
        timed,
        interval=interval,
        slow_every=round(defaults.slow_interval / interval),
        engine_every=round(defaults.engine_interval / interval),
    )
    reader.open()
    stages: defaultdict[str, float] = defaultdict(float)
    series_count = 0
    try:
        for _ in range(3):  # GPM's first sample, the samples' first window, the unsupported fields found
            reader.read(counters.fields, counters.labels)
            time.sleep(interval)
        timed.costs.clear()
        for _ in range(cycles):
            started = time.monotonic()
            t = time.thread_time()
            result = reader.read(counters.fields, counters.labels)
            t1 = time.thread_time()
            series = device_series(result.readings)
            t2 = time.thread_time()
            families = gpu_families(series, counters, (), reader.system_labels, "", None)
            t3 = time.thread_time()
            body = render_text(families)
            t4 = time.thread_time()
            stages["NVML reads (reader.read)"] += t1 - t
            stages["series"] += t2 - t1
            stages["families"] += t3 - t2
            stages["text"] += t4 - t3
            series_count = body.count(b"\nDCGM_") + body.startswith(b"DCGM_")
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
        costs = dict(timed.costs)  # before close() adds its own calls
    finally:
        reader.close()
    return Cycles(costs, dict(stages), cycles, series_count)


# An interpreter that finds no bytecode and writes none: it compiles every module it imports, as a Python whose
# standard library and packages come without .pyc files does (docs/collector-bench.md, bytecode)
NO_BYTECODE = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/nonexistent"}


def nvml_floor(env: Mapping[str, str] | None = None) -> list[tuple[str, float]]:
    """RSS of a bare interpreter, after ``import pynvml``, after ``nvmlInit()`` and one handle (each in a new one,
    with ``env`` added to this one's environment)."""
    steps = [
        ("bare python", "pass"),
        ("import pynvml", "import pynvml"),
        ("nvmlInit() + one handle", "import pynvml; pynvml.nvmlInit(); pynvml.nvmlDeviceGetHandleByIndex(0)"),
    ]
    out = []
    for label, code in steps:
        probe = f"{code}\nfor l in open('/proc/self/status'):\n    l.startswith('VmRSS:') and print(int(l.split()[1]))"
        added = {**os.environ, **(env or {})}
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False, env=added)
        out.append((label, int(done.stdout.split()[-1]) / 1024 if done.returncode == 0 else float("nan")))
    return out


def print_cycles(label: str, c: Cycles, gpus: int) -> None:
    total = sum(c.stages.values())
    print(f"\n### {label}: {c.series} DCGM series, {gpus} GPU(s), {c.cycles} cycles\n")
    print("| NVML function | calls per cycle | CPU ms per cycle | wall ms per cycle | CPU ms per call |")
    print("|---|---|---|---|---|")
    for name, cost in sorted(c.nvml.items(), key=lambda kv: -kv[1].cpu):
        print(
            f"| {name} | {cost.calls / c.cycles:.2f} | {1e3 * cost.cpu / c.cycles:.3f} | "
            f"{1e3 * cost.wall / c.cycles:.3f} | {1e3 * cost.cpu / max(1, cost.calls):.3f} |"
        )
    nvml_cpu = sum(cost.cpu for cost in c.nvml.values())
    print(
        f"| **all NVML calls** | {sum(x.calls for x in c.nvml.values()) / c.cycles:.1f} | "
        f"{1e3 * nvml_cpu / c.cycles:.3f} | {1e3 * sum(x.wall for x in c.nvml.values()) / c.cycles:.3f} | |"
    )
    print("\n| stage | CPU ms per cycle |\n|---|---|")
    for stage, cpu in c.stages.items():
        print(f"| {stage} | {1e3 * cpu / c.cycles:.3f} |")
    read = c.stages["NVML reads (reader.read)"]
    print(f"| of which Python around NVML | {1e3 * (read - nvml_cpu) / c.cycles:.3f} |")
    print(f"| **cycle** | {1e3 * total / c.cycles:.3f} ({1e3 * total / c.cycles / gpus:.3f} per GPU) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--simulate", type=int, default=0, help="simulated GPUs instead of the machine's")
    parser.add_argument("--skip-calls", action="store_true")
    args = parser.parse_args()
    if args.simulate:
        from collector.simulation.nvml import SimulatedNvml

        nvml: Any = SimulatedNvml(args.simulate)
    else:
        import pynvml

        nvml = pynvml
    nvml.nvmlInit()
    gpus = nvml.nvmlDeviceGetCount()
    name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0))
    driver = nvml.nvmlSystemGetDriverVersion()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{gpus} x {name}{' (simulated)' if args.simulate else ''}, driver {driver}"
    )
    if not args.simulate:
        print("\n### NVML's memory floor (RSS, MiB, each in a new interpreter)\n")
        print("| step | RSS | RSS, no bytecode cache |\n|---|---|---|")
        for (label, mib), (_, compiled) in zip(nvml_floor(), nvml_floor(NO_BYTECODE), strict=True):
            print(f"| {label} | {mib:.1f} | {compiled:.1f} |")
    if not args.skip_calls and not args.simulate:
        print(f"\n### One call on GPU 0, median of {args.repeat}\n")
        print("| call | what | CPU ms | wall ms | outcome |\n|---|---|---|---|---|")
        for row in call_table(nvml, args.repeat):
            print(f"| {row[0]} | {row[1]} | {row[2]:.3f} | {row[3]:.3f} | {row[4]} |")
    nvml.nvmlShutdown()
    for label, counters in (
        ("built-in counters", load_counters(None)),
        ("every field of dcgm-exporter's default file", dcgm_exporter_default_file()),
    ):
        print_cycles(label, run_cycles(nvml, counters, args.cycles, args.interval), gpus)


if __name__ == "__main__":
    main()
