"""The load generator where no GPU is: clear errors before anything runs; the validation verdict's logic."""

import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.errors import LoadError
from loadgen.validate import judge, read_gpu_series
from loadgen.workloads import KINDS, open_device

ROOT = Path(__file__).resolve().parents[2]

IDLE = {
    "DCGM_FI_DEV_GPU_UTIL": 0.0,
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.0001,
    "DCGM_FI_PROF_SM_ACTIVE": 0.0,
    "DCGM_FI_DEV_POWER_USAGE": 120.0,
    "DCGM_FI_DEV_FB_USED": 526.0,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.0,
}
GEMM = {"DCGM_FI_DEV_GPU_UTIL": 98.0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.98, "DCGM_FI_PROF_SM_ACTIVE": 0.94,
        "DCGM_FI_DEV_POWER_USAGE": 690.0, "DCGM_FI_DEV_FB_USED": 1010.0,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.91}  # fmt: skip


def test_what_the_h200_showed_passes() -> None:
    verdict = judge("gemm-bf16", 1.0, [IDLE] * 5, [GEMM] * 5)
    assert verdict.ok, verdict.table()
    assert "| DCGM_FI_PROF_PIPE_TENSOR_ACTIVE | < 0.05 | 0 | > 0.8 | 0.91 | yes |" in verdict.table()


def test_a_series_that_does_not_move_fails_and_says_why() -> None:
    stuck = {**GEMM, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.02}
    verdict = judge("gemm-bf16", 1.0, [IDLE] * 5, [stuck] * 5)
    assert not verdict.ok
    assert "NO: loaded 0.02 not > 0.8" in verdict.table()
    missing = {k: v for k, v in GEMM.items() if k != "DCGM_FI_PROF_SM_ACTIVE"}
    verdict = judge("gemm-bf16", 1.0, [IDLE] * 5, [missing] * 5)
    assert "| DCGM_FI_PROF_SM_ACTIVE | < 0.05 | 0 | > 0.5 | absent | NO: series absent |" in verdict.table()


def test_a_busy_idle_phase_fails() -> None:
    verdict = judge("gemm-bf16", 1.0, [GEMM] * 5, [GEMM] * 5)
    assert not verdict.ok
    assert "NO: idle 98 not < 10" in verdict.table()


def test_expectations_scale_with_the_duty_cycle() -> None:
    half = {**GEMM, "DCGM_FI_DEV_GPU_UTIL": 45.0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.45,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.44, "DCGM_FI_PROF_SM_ACTIVE": 0.43}  # fmt: skip
    assert judge("gemm-bf16", 0.5, [IDLE] * 3, [half] * 3).ok
    assert not judge("gemm-bf16", 1.0, [IDLE] * 3, [half] * 3).ok


def test_a_point_sampled_utilization_fails_a_partial_load() -> None:
    # duty 0.5 / period 0.2 s on the H200: GPM said 0.51, a point sample said 14 (docs/results/h200-utilization.md)
    half = {**GEMM, "DCGM_FI_DEV_GPU_UTIL": 50.4, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.51,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.47, "DCGM_FI_PROF_SM_ACTIVE": 0.48}  # fmt: skip
    assert judge("gemm-bf16", 0.5, [IDLE] * 3, [half] * 3).ok
    aliased = {**half, "DCGM_FI_DEV_GPU_UTIL": 14.2}
    verdict = judge("gemm-bf16", 0.5, [IDLE] * 3, [aliased] * 3)
    assert not verdict.ok
    assert "| DCGM_FI_DEV_GPU_UTIL | < 10 | 0 | DCGM_FI_PROF_GR_ENGINE_ACTIVE x100 ± 5" in verdict.table()
    assert "NO: loaded 14.2 not DCGM_FI_PROF_GR_ENGINE_ACTIVE x100 ± 5" in verdict.table()
    # a load that did not keep the duty cycle it was asked for
    assert (
        "NO: loaded 0.8 not 0.5 ± 0.1"
        in judge("gemm-bf16", 0.5, [IDLE] * 3, [GEMM | {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.8}] * 3).table()
    )


def test_without_gpm_utilization_is_held_to_the_duty_cycle() -> None:
    no_gpm = {k: v for k, v in GEMM.items() if not k.startswith("DCGM_FI_PROF_")}
    idle = {k: v for k, v in IDLE.items() if not k.startswith("DCGM_FI_PROF_")}
    rows = {
        r["series"]: r for r in judge("gemm-bf16", 0.25, [idle] * 3, [no_gpm | {"DCGM_FI_DEV_GPU_UTIL": 31.0}] * 3).rows
    }
    assert rows["DCGM_FI_DEV_GPU_UTIL"]["ok"]
    rows = {
        r["series"]: r for r in judge("gemm-bf16", 0.25, [idle] * 3, [no_gpm | {"DCGM_FI_DEV_GPU_UTIL": 36.0}] * 3).rows
    }
    assert not rows["DCGM_FI_DEV_GPU_UTIL"]["ok"]


def test_without_a_gpu_the_load_is_a_clear_error_before_it_starts() -> None:
    with pytest.raises(LoadError, match=r"PyTorch is not installed|no CUDA GPU is visible"):
        open_device(KINDS["gemm-bf16"], 8192, 0)
    result = subprocess.run(
        [sys.executable, "-m", "loadgen", "run", "--kind", "fp64", "--seconds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("gpuscale-load: error: ")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("args", "message"), [(["--duty", "1.5"], "duty must be in (0, 1]"),
                                               (["--kind", "int8"], "invalid choice: 'int8'")])  # fmt: skip
def test_bad_arguments_are_rejected(args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loadgen", "run", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert message in result.stderr


def test_validate_reads_only_the_device_wide_series_of_its_gpu(tmp_path: Path) -> None:
    page = tmp_path / "metrics"
    page.write_text(
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="a"} 90\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="a",pod="p",namespace="n",container="c"} 40\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="b"} 5\n'
    )
    assert read_gpu_series(page.as_uri(), "0") == {"DCGM_FI_DEV_GPU_UTIL": 90.0}


def test_validate_reads_dcgm_exporter_4_9_names_in_the_old_units(tmp_path: Path) -> None:
    """The collector's default page (dcgm-exporter 4.9/4.10's names) is judged as the 4.8 one."""
    page = tmp_path / "metrics"
    page.write_text(
        'DCGM_FI_DEV_GPU_UTIL_RATIO{gpu="0",UUID="a"} 0.9\n'
        'DCGM_FI_DEV_FB_USED_BYTES{gpu="0",UUID="a"} 2097152\n'
        'DCGM_FI_PROF_TENSOR_UTIL_RATIO{gpu="0",UUID="a"} 0.85\n'
    )
    assert read_gpu_series(page.as_uri(), "0") == {
        "DCGM_FI_DEV_GPU_UTIL_RATIO": 0.9,
        "DCGM_FI_DEV_GPU_UTIL": 90.0,
        "DCGM_FI_DEV_FB_USED_BYTES": 2097152.0,
        "DCGM_FI_DEV_FB_USED": 2.0,
        "DCGM_FI_PROF_TENSOR_UTIL_RATIO": 0.85,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.85,
    }
