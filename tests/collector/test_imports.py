"""Libraries only some flags need are imported only when those flags are given: each costs resident memory
(gRPC ~10 MiB, cryptography ~8 MiB, the Kubernetes client ~39 MiB; docs/collector-bench.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"grpc", "google", "kubernetes_asyncio", "cryptography", "bcrypt", "yaml", "re2"}

_BUILD = """
import json, sys
from collector.cli import build_node, choose_nvml
from collector.settings import parse_settings
settings = parse_settings(sys.argv[1:], env={})
nvml, simulated = choose_nvml(settings)
build_node(settings, nvml, simulated)
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def loaded(*args: str) -> set[str]:
    """The top-level packages a collector process has imported once its parts are built for ``args``."""
    out = subprocess.run(
        [sys.executable, "-c", _BUILD, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(out.stdout.splitlines()[-1])) & HEAVY


def test_a_collector_without_kubernetes_or_web_configuration_imports_none_of_them() -> None:
    assert loaded("--simulate-gpus", "2") == set()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-k", "--pod-resources-kubelet-socket", "/nonexistent.sock"], {"grpc", "google"}),
        (["--kubernetes-pod-label-allowlist-regex", "^app"], {"re2"}),
    ],
)
def test_the_flags_that_need_them_import_them(args: list[str], expected: set[str]) -> None:
    assert loaded("--simulate-gpus", "2", *args) >= expected


def test_a_simulation_spec_brings_yaml(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.yaml"
    spec.write_text("gpus: 1\n")
    assert "yaml" in loaded("--simulate-spec", str(spec))
