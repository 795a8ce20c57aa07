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


def test_make_run_passes_args_and_the_help_says_how() -> None:
    done = subprocess.run(["make", "--no-print-directory", "run", "ARGS=--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "usage: python -m demo [-h]" in done.stdout
    assert 'make run ARGS="--html demo.html"' in done.stdout


def program(name: str) -> str:
    """The console script ``pip install`` made, as a user runs it."""
    return str(Path(sys.executable).parent / name)


@pytest.mark.parametrize("name", ["gpuscale-collector", "gpuscale-adapter"])
def test_an_unknown_flag_is_one_line_that_names_it_and_where_the_flags_are(name: str) -> None:
    done = subprocess.run([program(name), "--bogus"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"{name}: error: unknown flag or argument: --bogus (see {name} --help)\n"


ADAPTER_LOCAL = ["--prometheus-url=http://127.0.0.1:9", "--insecure-serve-http", "--insecure-disable-auth",
                 "--bind-address=127.0.0.1", "--secure-port=0"]  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "reason"),
    [
        ("--config={missing}", "cannot read the rules file {missing}: No such file or directory"),
        # the README's command on a machine with no kubeconfig: the configuration is wrong, as with any other flag
        ("--lister-kubeconfig={missing}", "cannot configure the Kubernetes client: kubeconfig {missing}: cannot read"),
    ],
)
def test_an_adapter_that_cannot_start_says_why_last_and_exits_2(tmp_path: Path, flag: str, reason: str) -> None:
    missing = tmp_path / "absent"
    done = subprocess.run([program("gpuscale-adapter"), *ADAPTER_LOCAL, flag.format(missing=missing)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)  # fmt: skip
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert reason.format(missing=missing) in lines[-1]
    assert not [line for line in lines if line.endswith(" stopped")], "it never served: nothing was stopped"
