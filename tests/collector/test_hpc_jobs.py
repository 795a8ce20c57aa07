"""--hpc-job-mapping-dir: files named by GPU (or GPU.instance) listing jobs, read as dcgm-exporter reads them."""

import logging
import os
from pathlib import Path

import pytest

from collector.pods.hpc_jobs import MAX_FILE_BYTES, MAX_ID_CHARS, MAX_JOBS, HpcJobs
from collector.series import Series

GPU0 = (("gpu", "0"), ("UUID", "GPU-0"))
GPU1 = (("gpu", "1"), ("UUID", "GPU-1"))
GPU1_GI2 = (*GPU1, ("GPU_I_PROFILE", "1g.18gb"), ("GPU_I_ID", "2"))


def labelled(jobs: HpcJobs) -> list[tuple[str, str | None]]:
    """(gpu or gpu.instance, hpc_job) of each series the mapping gives three entities."""
    out = []
    for s in jobs.label([Series(GPU0, {"x": 1.0}), Series(GPU1, {"x": 2.0}), Series(GPU1_GI2, {"x": 3.0})]):
        entity = dict(s.entity)
        key = entity["gpu"] + (f".{entity['GPU_I_ID']}" if "GPU_I_ID" in entity else "")
        assert s.values["x"] == {"0": 1.0, "1": 2.0, "1.2": 3.0}[key]  # a job's copy keeps its GPU's values
        out.append((key, dict(s.owner).get("hpc_job")))
    return out


def test_one_series_per_job_and_gpus_without_jobs_unchanged(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("1001\n1002\n")
    (tmp_path / "1.2").write_text("2001\n")
    (tmp_path / "notes.txt").write_text("3001\n")  # not a GPU file: ignored
    (tmp_path / "7").mkdir()  # a directory named like a GPU: ignored
    assert labelled(HpcJobs(str(tmp_path))) == [("0", "1001"), ("0", "1002"), ("1", None), ("1.2", "2001")]


def test_blank_lines_spaces_and_repeats_are_dropped(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("\n 1001 \n\n1001\n1002")
    (tmp_path / "1").write_text("\n\n")  # empty: its series stay unlabelled, not labelled hpc_job=""
    assert HpcJobs(str(tmp_path)).current() == {"0": ("1001", "1002")}


def test_files_are_read_again_only_when_they_change(tmp_path: Path) -> None:
    job_file = tmp_path / "0"
    job_file.write_text("1001\n")
    jobs = HpcJobs(str(tmp_path))
    assert jobs.current() == {"0": ("1001",)}
    job_file.write_text("1002\n1003\n")  # the next job's prolog
    assert jobs.current() == {"0": ("1002", "1003")}
    # the same inode, size and time: taken as unchanged, so the last reading stays (the file is not read again)
    before = job_file.stat()
    job_file.write_text("1004\n1005\n")
    os.utime(job_file, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert jobs.current() == {"0": ("1002", "1003")}
    os.utime(job_file, ns=(before.st_atime_ns, before.st_mtime_ns + 1))
    assert jobs.current() == {"0": ("1004", "1005")}
    job_file.unlink()  # the epilog
    assert jobs.current() == {}


def test_a_missing_directory_is_said_once_and_picked_up_when_it_appears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "jobs"
    jobs = HpcJobs(str(directory))
    with caplog.at_level(logging.ERROR):
        assert jobs.current() == {}
        assert jobs.current() == {}
    assert len([r for r in caplog.records if "does not exist" in r.getMessage()]) == 1
    directory.mkdir()
    (directory / "0").write_text("1001\n")
    assert jobs.current() == {"0": ("1001",)}


def test_a_symbolic_link_is_refused_with_a_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    secret = tmp_path.parent / f"{tmp_path.name}-shadow"
    secret.write_text("root:$6$secret-hash:19000:0:99999:7:::\n")
    (tmp_path / "0").symlink_to(secret)
    (tmp_path / "1").symlink_to("/proc/self/environ")
    (tmp_path / "1.2").write_text("2001\n")
    with caplog.at_level(logging.WARNING):
        assert HpcJobs(str(tmp_path)).current() == {"1.2": ("2001",)}
    refused = [r.getMessage() for r in caplog.records]
    assert f"HPC job mapping file {tmp_path / '0'} is not read: it is a symbolic link" in refused
    assert f"HPC job mapping file {tmp_path / '1'} is not read: it is a symbolic link" in refused
    assert "secret-hash" not in caplog.text


def test_a_file_larger_than_a_scheduler_writes_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "0").write_text("".join(f"{1000000 + n}\n" for n in range(20_000)))  # 160 KB
    (tmp_path / "1").write_text("x" * (MAX_ID_CHARS + 1) + "\n")
    (tmp_path / "1.2").write_text("2001\n")
    with caplog.at_level(logging.WARNING):
        assert HpcJobs(str(tmp_path)).current() == {"1.2": ("2001",)}
    assert f"{tmp_path / '0'} is not read: it is larger than {MAX_FILE_BYTES // 1024} KiB" in caplog.text
    assert f"{tmp_path / '1'} is not read: a line is longer than {MAX_ID_CHARS} characters" in caplog.text


def test_jobs_past_the_limit_of_a_gpu_are_left_out_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "0").write_text("".join(f"{n}\n" for n in range(MAX_JOBS + 36)))
    with caplog.at_level(logging.WARNING):
        jobs = HpcJobs(str(tmp_path)).current()
    assert jobs == {"0": tuple(str(n) for n in range(MAX_JOBS))}
    assert f"lists {MAX_JOBS + 36} jobs: the first {MAX_JOBS} are served" in caplog.text


def test_a_fifo_named_like_a_gpu_does_not_hang_the_cycle(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "0")
    (tmp_path / "1").write_text("1001\n")
    assert HpcJobs(str(tmp_path)).current() == {"1": ("1001",)}
