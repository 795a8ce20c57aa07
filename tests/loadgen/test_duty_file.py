"""``gpuscale-load run --duty-file``: a duty another program changes while the load runs."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.duty_file import DutyFile, parse_duty
from loadgen.errors import LoadError

ROOT = Path(__file__).resolve().parents[2]


def rewrite(path: Path, text: str) -> None:
    new = path.with_suffix(".new")
    new.write_text(text)
    os.replace(new, path)


def test_the_duty_follows_each_rewrite_and_a_bad_one_keeps_the_last(tmp_path: Path) -> None:
    path = tmp_path / "duty"
    path.write_text("0.65\n")
    warnings = io.StringIO()
    duty = DutyFile(path, warnings=warnings)
    assert duty() == 0.65
    rewrite(path, "0.1625")
    assert duty() == 0.1625
    rewrite(path, "2")
    assert duty() == 0.1625
    assert warnings.getvalue() == f"gpuscale-load: {path}: expected a duty from 0 to 1, got 2; keeping duty 0.1625\n"
    rewrite(path, "0")
    assert duty() == 0.0  # idle: a replica with no work


@pytest.mark.parametrize(("text", "message"), [("", "got ''"), ("half", "got 'half'"), ("-0.1", "got -0.1")])
def test_bad_duties_name_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(LoadError, match=f"^duty: expected a duty from 0 to 1, {message}$"):
        parse_duty(text, "duty")


def test_a_missing_duty_file_is_a_clear_error_before_the_load_starts(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loadgen", "run", "--duty-file", str(tmp_path / "none")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert (
        result.stderr
        == f"gpuscale-load: error: duty file {tmp_path / 'none'} cannot be read: No such file or directory\n"
    )
