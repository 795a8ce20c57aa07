"""The collector's own exceptions.

CollectorError
├── ConfigError        a flag, environment variable or counters file is wrong; the message names which and why
└── NvmlUnavailable    NVML could not start (no driver, no library); the process stays up and retries
"""


class CollectorError(Exception):
    """Base of every error the collector raises on purpose."""


class ConfigError(CollectorError):
    """Configuration the user gave cannot be used."""


class NvmlUnavailable(CollectorError):
    """NVML did not initialise; the message says why."""
