"""The Prometheus-compatible servers by name: ``default`` (``--prometheus-url``) and each ``--prometheus-backend``.

Every part that asks Prometheus (discovery, the provider, metrics.k8s.io, explain) asks the backend its rule names;
the rules file is refused when a rule names one that is not here, so a lookup cannot fail. A part given a single
``PrometheusAPI`` (a test's stand-in, a tool) has it as the default backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

from adapter.backends.backend_specs import DEFAULT, BackendSpec
from adapter.backends.prometheus import PrometheusAPI, PrometheusConfig


class Backends(Mapping[str, PrometheusAPI]):
    def __init__(self, apis: Mapping[str, PrometheusAPI]) -> None:
        if DEFAULT not in apis:
            raise ValueError(f"the backends need a {DEFAULT!r} one")
        self._apis = dict(apis)

    @classmethod
    def of(cls, prometheus: PrometheusAPI | Backends) -> Backends:
        return prometheus if isinstance(prometheus, Backends) else cls({DEFAULT: prometheus})

    @property
    def default(self) -> PrometheusAPI:
        return self._apis[DEFAULT]

    def __getitem__(self, name: str) -> PrometheusAPI:
        return self._apis[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._apis)

    def __len__(self) -> int:
        return len(self._apis)


def backend_config(config: PrometheusConfig, spec: BackendSpec) -> PrometheusConfig:
    """A named backend's connection: ``config`` (the ``--prometheus-*`` flags') with the backend's URL, its headers
    in place of those of the same name (HTTP header names ignore case), and its partial-response choice if it made
    one."""
    own = {key.lower() for key, _ in spec.headers}
    headers = (*((k, v) for k, v in config.headers if k.lower() not in own), *spec.headers)
    partial = config.partial_response if spec.partial_response is None else spec.partial_response
    return dataclasses.replace(config, url=spec.url, headers=headers, partial_response=partial, backend=spec.name)
