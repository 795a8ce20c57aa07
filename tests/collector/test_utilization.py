"""Utilization is the busy fraction of the collection interval, not one short sample (collector/nvml/utilization.py)."""

import random
import statistics

import pynvml
import pytest

from collector.nvml.reader import NvmlReader
from collector.nvml.utilization import SampleWindow, UtilizationSampler
from collector.simulation.nvml import SimulatedNvml
from harness.node.nvml_trace import ReplayNvml
from harness.node.samples import sample

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
SAMPLED = frozenset({GPU_UTIL, "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL"})
MS = 1000  # µs


class Clock:
    def __init__(self, now: float = 5000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- the window, by hand -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        # five 200 ms windows in one second: their plain mean
        ([(200, 10), (400, 20), (600, 30), (800, 40), (1000, 50)], 30.0),
        # a sixth, older sample ends exactly where the second begins: it lies outside and weighs nothing
        ([(0, 100), (200, 10), (400, 20), (600, 30), (800, 40), (1000, 50)], 30.0),
        # samples 250 ms apart (another GPU's rate): four of them make the second, the oldest lies before it
        ([(250, 0), (500, 100), (750, 100), (1000, 100), (1250, 0)], 75.0),
        # NVML dropped two samples before 1000: that one stands for 1.5 usual windows (300 ms), not for 600
        ([(200, 0), (400, 0), (1000, 100), (1200, 100)], 500 / 7),
        # a lone sample is all there is
        ([(5000, 42)], 42.0),
    ],
)
def test_a_window_weighs_each_sample_by_its_time_inside_the_last_interval(
    samples: list[tuple[int, float]], expected: float
) -> None:
    window = SampleWindow(span_us=1000 * MS)
    window.add((ts * MS, v) for ts, v in samples)
    assert window.mean() == pytest.approx(expected)


def test_a_window_takes_only_newer_samples_and_keeps_one_boundary() -> None:
    window = SampleWindow(span_us=1000 * MS)
    assert window.mean() is None
    assert window.add([(200 * MS, 50.0), (400 * MS, 50.0)]) == 2
    assert window.last_seen == 400 * MS
    assert window.add([(400 * MS, 99.0), (300 * MS, 99.0)]) == 0  # already seen or older: ignored
    assert window.add((ts * MS, 10.0) for ts in range(600, 5001, 200)) == 23
    assert window.mean() == pytest.approx(10.0)
    # 23 + 2 samples taken; those wholly older than the window are gone but for the one marking its start
    assert len(window._samples) == 6


# -- the simulated H200: duty-cycled load, 200 ms samples, a point value that aliases ---------------------------


def exported(duty: float, period: float, cycles: int = 20, seed: int = 0) -> tuple[list[float], list[int]]:
    """GPU_UTIL the reader exports each cycle, and NVML's point value read at the same moments, while a load is busy
    for ``duty x period`` of every period; cycles are 1 s apart with up to ±50 ms of jitter, at a random phase."""
    rng = random.Random(seed)
    clock = Clock()
    nvml = SimulatedNvml(1, load=lambda index, t: duty, clock=clock, wall_clock=clock, period=period)
    reader = NvmlReader(nvml, interval=1.0)
    reader.open()
    clock.now += rng.uniform(0, 1)
    values, points = [], []
    for _ in range(cycles):
        clock.now += 1.0 + rng.uniform(-0.05, 0.05)
        values.append(reader.read(frozenset({GPU_UTIL})).readings[0].values[GPU_UTIL])
        points.append(nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(0)).gpu)
    return values, points


@pytest.mark.parametrize("period", [0.02, 0.2, 1.0])
@pytest.mark.parametrize("duty", [0.1, 0.25, 0.5, 0.75, 1.0])
def test_the_exported_value_is_the_busy_fraction_within_two_points(duty: float, period: float) -> None:
    for seed in range(3):
        values, _ = exported(duty, period, seed=seed)
        assert all(abs(v - 100 * duty) <= 2 for v in values), (seed, values)


@pytest.mark.parametrize(("duty", "period"), [(0.5, 0.2), (0.25, 1.0), (0.5, 1.0)])
def test_the_point_value_of_the_same_load_aliases(duty: float, period: float) -> None:
    """What dcgm-exporter reports: one ~100 ms sample, right only by chance under a periodic load."""
    _, points = exported(duty, period, seed=1)
    assert max(abs(p - 100 * duty) for p in points) > 20
    assert statistics.mean(points) != pytest.approx(100 * duty, abs=2) or statistics.pstdev(points) > 10


def test_a_load_change_shows_within_one_interval_and_never_overshoots() -> None:
    clock = Clock()
    nvml = SimulatedNvml(1, load=lambda index, t: 0.0 if t < 10 else 0.6, clock=clock, wall_clock=clock, period=0.2)
    reader = NvmlReader(nvml, interval=1.0)
    reader.open()
    values = []
    for _ in range(16):
        clock.now += 1.0
        values.append(reader.read(frozenset({GPU_UTIL})).readings[0].values[GPU_UTIL])
    assert values[:9] == [0] * 9
    assert all(0 <= v <= 60 for v in values)
    assert values[-4:] == [60] * 4


# -- faults: an empty buffer, a GPU that keeps no samples, one failing buffer ------------------------------------


def test_no_new_samples_serve_the_last_value_for_a_while_then_nothing(h200: ReplayNvml) -> None:
    clock = Clock()
    sampler = UtilizationSampler(h200, h200.nvmlDeviceGetHandleByIndex(0), interval=1.0, clock=clock)
    first = sampler.read("gpu_util")
    assert first is not None
    h200.fail("nvmlDeviceGetSamples", pynvml.NVML_ERROR_NOT_FOUND)  # NVML's answer when nothing is newer
    clock.now += 4.0
    assert sampler.read("gpu_util") == first
    clock.now += 2.0  # over max(5 s, 3 intervals) without a new sample
    assert sampler.read("gpu_util") is None
    h200.clear_faults()
    assert sampler.read("gpu_util") is not None


def test_the_first_cycle_averages_the_last_interval_of_the_buffer() -> None:
    clock = Clock()
    # busy before the collector started, idle since: the buffer's history must not leak into the first value
    nvml = SimulatedNvml(1, load=lambda index, t: 1.0 if t < 0 else 0.0, clock=clock, wall_clock=clock)
    reader = NvmlReader(nvml, interval=1.0)
    reader.open()
    clock.now += 1.0
    assert reader.read(frozenset({GPU_UTIL})).readings[0].values[GPU_UTIL] == 0


def test_a_gpu_without_samples_serves_the_point_value_and_says_so(h200: ReplayNvml) -> None:
    h200.fail("nvmlDeviceGetSamples", pynvml.NVML_ERROR_NOT_SUPPORTED)
    reader = NvmlReader(h200)
    reader.open()
    values = reader.read(SAMPLED).readings[0].values
    assert values[GPU_UTIL] == h200.recorded("nvmlDeviceGetUtilizationRates", "gpu0").gpu
    assert reader.point_sampled == {(0, name) for name in SAMPLED}
    # served, just not averaged (the recording holds no encoder or decoder point value: a driver without those
    # calls, whose FunctionNotFound marks the two fields unsupported, is another matter)
    assert not {name for _, name in reader.unsupported} & {GPU_UTIL, "DCGM_FI_DEV_MEM_COPY_UTIL"}


def test_the_self_metric_names_point_sampled_fields(h200: ReplayNvml, make_collection) -> None:  # type: ignore[no-untyped-def]
    h200.fail("nvmlDeviceGetSamples", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)  # a driver older than the call
    collection = make_collection(h200)
    collection.run_once()
    assert sample(collection, "gpuscale_collector_utilization_point_sampled", gpu="0", field=GPU_UTIL) == 1
    assert sample(collection, GPU_UTIL, gpu="0") is not None


def test_the_self_metric_is_absent_when_every_value_is_averaged(h200: ReplayNvml, make_collection) -> None:  # type: ignore[no-untyped-def]
    collection = make_collection(h200)
    collection.run_once()
    assert sample(collection, "gpuscale_collector_utilization_point_sampled") is None


def test_a_failing_buffer_costs_only_its_own_field(h200: ReplayNvml) -> None:
    reader = NvmlReader(h200)
    reader.open()
    h200.fail("nvmlDeviceGetSamples", pynvml.NVML_ERROR_TIMEOUT, times=1)
    result = reader.read(SAMPLED)
    assert len(result.readings[0].values.keys() & SAMPLED) == 3
    assert sum(result.errors.values()) == 1
    assert reader.read(SAMPLED).readings[0].values.keys() >= SAMPLED


# -- the recorded H200 under partial load (harness/node/traces/h200.json) -----------------------------------------


@pytest.mark.parametrize(("phase", "duty"), [("half", 0.5), ("quarter_slow", 0.25)])
def test_the_recorded_partial_loads_read_what_gpm_counted(phase: str, duty: float) -> None:
    nvml = ReplayNvml.load("h200", phase)
    reader = NvmlReader(nvml)
    reader.open()
    fields = frozenset({GPU_UTIL, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"})
    cycles = [reader.read(fields).readings[0].values for _ in range(10)]  # the phase's recorded cycles, once
    steady = cycles[3:]  # the load had started; GPM reports the interval before its sample, one cycle later
    exported = [c[GPU_UTIL] for c in steady]
    truth = [100 * c["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] for c in steady]
    assert statistics.mean(exported) == pytest.approx(100 * duty, abs=3)
    assert statistics.mean(exported) == pytest.approx(statistics.mean(truth), abs=2)
    assert max(exported) - min(exported) <= 2
    points = [u.gpu for u in nvml.recorded_in_phase("nvmlDeviceGetUtilizationRates", "gpu0")[3:10]]
    assert len(points) == 7
    # what a point sample said of the same seconds: scattered (duty 0.5 of 0.2 s) or stuck at 0 (duty 0.25 of 1 s)
    assert max(points) - min(points) >= 15 or statistics.median(points) == 0


# -- the engine utilizations: their own span and cadence ---------------------------------------------------------


class CountingNvml(SimulatedNvml):
    """Simulated GPUs that also note which sample buffer each nvmlDeviceGetSamples call read."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.buffers: list[int] = []

    def nvmlDeviceGetSamples(self, handle, sampling_type, last_seen):  # type: ignore[no-untyped-def]
        self.buffers.append(sampling_type)
        return super().nvmlDeviceGetSamples(handle, sampling_type, last_seen)


def test_engine_utilizations_span_their_own_interval_and_are_read_once_per_span() -> None:
    clock = Clock()
    # busy for the first second of every five: the GPU's utilization follows each second, the memory-copy
    # utilization (0.38 of the load in the simulation) is the mean of the five, 38 x 1/5
    nvml = CountingNvml(1, load=lambda index, t: 1.0 if int(t) % 5 == 0 else 0.0, clock=clock, wall_clock=clock)
    reader = NvmlReader(nvml, interval=1.0, engine_every=5)
    reader.open()
    gpu, mem = [], []
    for cycle in range(20):
        clock.now += 1.0
        nvml.buffers.clear()
        values = reader.read(SAMPLED).readings[0].values
        gpu.append(values[GPU_UTIL])
        mem.append(values["DCGM_FI_DEV_MEM_COPY_UTIL"])
        engine = [b for b in nvml.buffers if b != pynvml.NVML_GPU_UTILIZATION_SAMPLES]
        assert nvml.buffers.count(pynvml.NVML_GPU_UTILIZATION_SAMPLES) == 1, f"cycle {cycle}"
        assert cycle == 0 or len(engine) <= 1, f"cycle {cycle} read {len(engine)} engine buffers"
    assert sorted(set(gpu[5:])) == [0, 100]
    assert mem[5:] == pytest.approx([7.6] * 15)


def test_each_engine_buffer_is_read_once_per_span_on_a_cycle_of_its_own() -> None:
    nvml = CountingNvml(1)
    reader = NvmlReader(nvml, interval=1.0, engine_every=5)
    reader.open()
    read_on: dict[int, list[int]] = {}
    for cycle in range(15):
        nvml.buffers.clear()
        reader.read(SAMPLED)
        for buffer in nvml.buffers:
            read_on.setdefault(buffer, []).append(cycle)
    assert read_on[pynvml.NVML_GPU_UTILIZATION_SAMPLES] == list(range(15))
    engine = [read_on[b] for b in (pynvml.NVML_MEMORY_UTILIZATION_SAMPLES, pynvml.NVML_ENC_UTILIZATION_SAMPLES,
                                   pynvml.NVML_DEC_UTILIZATION_SAMPLES)]  # fmt: skip
    # the first cycle reads every buffer, for a value from the start
    assert engine == [[0, 4, 9, 14], [0, 3, 8, 13], [0, 2, 7, 12]]
