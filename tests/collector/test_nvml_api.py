"""The NVML protocol against the real ``pynvml`` module, which mypy cannot check (it is untyped)."""

import pynvml

from collector.nvml.api import Nvml
from collector.nvml.fields import GPM_METRICS, SAMPLED_READINGS


def declared() -> set[str]:
    return set(Nvml.__annotations__) | {name for name in vars(Nvml) if name.startswith(("nvml", "c_nvml"))}


def test_pynvml_has_every_declared_call_and_constant() -> None:
    assert sorted(name for name in declared() if not hasattr(pynvml, name)) == []


def test_the_constants_the_field_tables_name_are_declared() -> None:
    named = {s.sampling_type for s in SAMPLED_READINGS.values()} | {metric for metric, _ in GPM_METRICS.values()}
    assert named - declared() == set()
