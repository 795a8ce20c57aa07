"""Every program says its version, as dcgm-exporter's and prometheus-adapter's do: one line, exit 0."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("module", "program"), [("collector", "gpuscale-collector"), ("adapter", "gpuscale-adapter"),
                                                 ("loadgen", "gpuscale-load")])  # fmt: skip
def test_version(module: str, program: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, cwd=ROOT)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{program} version {metadata.version('gpuscale')}\n", "")
