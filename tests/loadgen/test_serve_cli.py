"""``gpuscale-load serve`` from the command line: a bad flag is one clear line and exit 2; a simulated run serves
vLLM's /metrics, prints a line per interval and a summary, and stops cleanly at its end or at SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from harness.processes import free_port
from loadgen.cli import main
from loadgen.serving.arrivals import Arrivals
from loadgen.serving.rate_file import parse_rates
from loadgen.serving.settings import OUTPUT, PROMPT

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "one of the arguments --rate --rate-file is required"),
        (["--rate", "1", "--rate-file", "r"], "argument --rate-file: not allowed with argument --rate"),
        (["--rate", "-1"], "argument --rate: must be 0 or more, got -1"),
        (["--rate", "fast"], "argument --rate: expected a number, got 'fast'"),
        (["--rate", "1", "--seconds", "0"], "argument --seconds: must be above 0, got 0"),
        (["--rate", "1", "--prompt-tokens", "0"],
         "argument --prompt-tokens: expected 1 <= LOW <= HIGH tokens, got '0'"),
        (["--rate", "1", "--output-tokens", "9-3"],
         "argument --output-tokens: expected 1 <= LOW <= HIGH tokens, got '9-3'"),
        (["--rate", "1", "--max-batch", "0"], "argument --max-batch: must be 1 or more, got 0"),
        (["--rate", "1", "--kv-tokens", "1.5"], "argument --kv-tokens: expected a whole number, got '1.5'"),
        (["--rate", "1", "--port", "70000"], "argument --port: must be 65535 or less, got 70000"),
    ],
)  # fmt: skip
def test_a_bad_flag_is_one_line_and_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["serve", *args])
    assert done.value.code == 2
    assert capsys.readouterr().err == f"gpuscale-load serve: error: {message}\n"


def test_an_unknown_flag_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["serve", "--rate", "1", "--turbo"])
    assert done.value.code == 2
    assert capsys.readouterr().err == "gpuscale-load: error: unrecognized arguments: --turbo\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sim-step-ms", "5"], "--sim-step-ms needs --simulate"),
        (["--simulate", "--layers", "8"], "--layers has no effect with --simulate"),
        (["--simulate", "--prompt-tokens", "100-30000"],
         "the longest request (30000 prompt + 128 output tokens) does not fit --kv-tokens 24576"),
        (["--simulate", "--kv-tokens", "100000", "--output-tokens", "9000"],
         "the longest request (256 prompt + 9000 output tokens) does not fit --max-step-tokens 8192"),
        (["--simulate", "--max-batch", "100", "--max-step-tokens", "99", "--output-tokens", "8", "--prompt-tokens",
          "8"],
         "--max-batch 100 is more than --max-step-tokens 99: a full batch decodes a token each per step"),
    ],
)  # fmt: skip
def test_flags_that_do_not_go_together_are_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["serve", "--rate", "1", *args])
    assert done.value.code == 2
    assert capsys.readouterr().err == f"gpuscale-load: error: {message}\n"


def test_a_bad_rate_file_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rates = tmp_path / "rates"
    rates.write_text("0 5\n10 lots\n")
    with pytest.raises(SystemExit) as done:
        main(["serve", "--simulate", "--rate-file", str(rates)])
    assert done.value.code == 2
    assert capsys.readouterr().err == f"gpuscale-load: error: {rates}:2: rate must be a number, got 'lots'\n"


def serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loadgen", "serve", "--simulate", "--host", "127.0.0.1", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


def test_a_simulated_run_serves_vllm_metrics_and_ends_with_a_summary(tmp_path: Path) -> None:
    rates = tmp_path / "rates"
    rates.write_text("0 40\n1 0\n")
    port = free_port()
    process = serve("--rate-file", str(rates), "--seconds", "2.5", "--interval", "1", "--port", str(port))
    assert process.stderr is not None
    first = process.stderr.readline()
    assert first == f"serving /metrics on http://127.0.0.1:{port}/metrics; simulated steps, 2.5 s\n"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        page = resp.read().decode()
    assert 'vllm:num_requests_running{engine="0",model_name="toy-batching-model"}' in page
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    lines = err.splitlines()
    assert len(lines) == 2
    assert " arrived, waiting " in lines[0]
    assert "Traceback" not in err
    summary = json.loads(out)
    # the arrivals are seed 0's Poisson process of the rate file, whatever the machine's speed
    expected = Arrivals(parse_rates(rates.read_text(), str(rates)), PROMPT, OUTPUT, seed=0).due(2.5)
    assert summary["arrivals"] == len(expected) > 0
    # every request that arrived is accounted for, however fast this machine ran them
    assert summary["arrivals"] == summary["finished"] + summary["waiting_at_end"] + summary["running_at_end"]
    assert summary["generation_tokens"] >= 128 * summary["finished"]


def test_sigterm_stops_the_run_with_its_summary() -> None:
    process = serve("--rate", "5", "--seconds", "600", "--port", str(free_port()))
    assert process.stderr is not None
    assert process.stderr.readline().startswith("serving /metrics on ")
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert (process.returncode, err) == (0, "")
    assert json.loads(out)["seconds"] < 600
