"""The collector's own exceptions.

CollectorError
├── ConfigError        a flag, environment variable or counters file is wrong; the message names which and why
└── NvmlUnavailable    NVML could not start (no driver, no library); the process stays up and retries

Raised and caught inside the collector (each costs one poll, refresh or process, counted, never the process):
NvmlReadError          NVML did not answer a per-process utilization poll of one GPU
PodResourcesError      the kubelet's pod-resources call failed; ``kind`` names how (for the error counter)
ProcessGone            a process exited between being listed and being looked up
KubeError              a Kubernetes API request failed (``kube/client.py``); the watch or read is tried again
├── KubeApiError       the API server answered an error status, or a watch sent an ERROR event: its code and Status
└── KubeUnreachable    no answer: connection, TLS, time, a stream cut short (the socket's, TLS's or h11's error named)
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


class KubeError(Exception):
    """A Kubernetes API request failed; the message names the request and why."""


class KubeApiError(KubeError):
    """The API server answered ``status`` (0 when an ERROR watch event carried no code). ``reason`` is the HTTP
    reason phrase, or the Status's ``reason`` for a watch event; ``message`` the Status's message ("" when none);
    ``retry_after`` the seconds a 429 or 5xx asked to wait before asking again (None: it did not)."""

    def __init__(self, status: int, reason: str, message: str = "", retry_after: float | None = None) -> None:
        said = f": {message}" if message and message != reason else ""
        super().__init__(f"{status} {reason}{said}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


class KubeUnreachable(KubeError):
    """The API server gave no (complete) answer: the connection, TLS, a timeout, or a stream that broke off."""
