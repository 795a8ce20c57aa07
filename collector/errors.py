"""The collector's own exceptions.

CollectorError
├── ConfigError        a flag, environment variable or counters file is wrong; the message names which and why
└── NvmlUnavailable    NVML could not start (no driver, no library); the process stays up and retries

Raised and caught inside the collector (each costs one poll, refresh or process, counted, never the process):
NvmlReadError          NVML did not answer a per-process utilization poll of one GPU
PodResourcesError      the kubelet's pod-resources call failed; ``kind`` names how (for the error counter)
ProcessGone            a process exited between being listed and being looked up
"""


class CollectorError(Exception):
    """Base of every error the collector raises on purpose."""


class ConfigError(CollectorError):
    """Configuration the user gave cannot be used."""


class NvmlUnavailable(CollectorError):
    """NVML did not initialise; the message says why."""


class NvmlReadError(Exception):
    """NVML did not answer a read; the message names the GPU and NVML's error."""


class PodResourcesError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class ProcessGone(Exception):
    """The process exited between being listed and being looked up."""
