"""What every program says of itself: its version (one line, exit 0, as dcgm-exporter's and prometheus-adapter's),
and help text as a terminal shows it."""

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


@pytest.mark.parametrize("module", ["collector", "adapter", "loadgen", "demo"])
def test_help_has_no_markup(module: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "usage: " in done.stdout
    assert "``" not in done.stdout


def test_explain_help_documents_its_own_arguments() -> None:
    done = subprocess.run([sys.executable, "-m", "adapter", "explain", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.startswith("usage: gpuscale-adapter explain [flags] [--json] PATH\n")
    assert "  --json    print the report as JSON" in done.stdout
    assert "--tls-cipher-suites" not in done.stdout  # not the serving command's whole flag list
