"""The external scaler's settings, with their defaults from ``flags.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from adapter.keda.flags import default


@dataclass(frozen=True)
class KedaSettings:
    address: str | None = default("keda-scaler-address")  # None: no gRPC server
    client_ca_file: Path | None = default("keda-client-ca-file")
    stream_interval: float = default("keda-stream-interval")
    max_streams: int = default("keda-max-streams")
    max_streams_per_namespace: int = default("keda-max-streams-per-namespace")
    client_allowed_names: tuple[str, ...] = default("keda-client-allowed-names")  # (): any certificate of the CA
