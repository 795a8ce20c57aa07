"""Profiling metrics from NVML GPM (Hopper and newer), the data DCGM's profiling fields are made of.

GPM compares two samples of hardware counters; each read takes a new sample and reports the interval since the
previous one, so the first read after start returns nothing.
"""

from __future__ import annotations

import contextlib

from collector.nvml.api import Handle, Nvml
from collector.nvml.fields import GPM_METRICS, Values


def gpm_supported(nvml: Nvml, handle: Handle) -> bool:
    """Whether the device answers GPM at all; older GPUs and drivers say NotSupported or lack the function."""
    try:
        return bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except nvml.NVMLError:
        return False


class GpmSampler:
    def __init__(self, nvml: Nvml, handle: Handle, gpu_instance_id: int | None = None) -> None:
        self._nvml = nvml
        self._handle = handle
        self._gpu_instance_id = gpu_instance_id
        self._samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        self._have_previous = False

    def read(self, fields: frozenset[str]) -> Values | None:
        """Ratios and rates for ``fields`` over the interval since the previous read; None on the first read."""
        nvml = self._nvml
        previous, current = self._samples
        if self._gpu_instance_id is None:
            nvml.nvmlGpmSampleGet(self._handle, current)
        else:
            nvml.nvmlGpmMigSampleGet(self._handle, self._gpu_instance_id, current)
        self._samples.reverse()
        if not self._have_previous:
            self._have_previous = True
            return None
        wanted = [(name, *GPM_METRICS[name]) for name in sorted(fields) if name in GPM_METRICS]
        if not wanted:
            return {}
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1 = previous
        request.sample2 = current
        for i, (_name, metric, _scale) in enumerate(wanted):
            request.metrics[i].metricId = getattr(nvml, metric)
        nvml.nvmlGpmMetricsGet(request)
        out: Values = {}
        for i, (name, _metric, scale) in enumerate(wanted):
            result = request.metrics[i]
            if result.nvmlReturn == nvml.NVML_SUCCESS:
                out[name] = float(result.value) * scale
        return out

    def close(self) -> None:
        for sample in self._samples:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlGpmSampleFree(sample)
