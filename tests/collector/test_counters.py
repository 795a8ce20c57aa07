from pathlib import Path

import pytest

from collector.counters import file as counters
from collector.errors import ConfigError
from collector.nvml.fields import FIELDS

USER_FILE = """\
# Format
# If line starts with a '#' it is considered a comment
# DCGM FIELD, Prometheus metric type, help message

# Clocks
DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).
   DCGM_FI_DEV_GPU_UTIL  ,  gauge  ,  GPU utilization (in %).
DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).
DCGM_EXP_GPU_HEALTH_STATUS, counter, DCGM reported health status
DCGM_FI_DEV_NOT_A_FIELD, gauge, Nothing reads this.
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).
DCGM_FI_PROF_GR_ENGINE_ACTIVE, histogram, Ratio of time the graphics engine is active, as a fraction.
DCGM_FI_DRIVER_VERSION,        label, Driver Version
DCGM_FI_DEV_SM_CLOCK, gauge, listed twice
"""


def test_a_dcgm_exporter_file_works_unchanged() -> None:
    parsed = counters.parse(USER_FILE, "dcp-metrics-included.csv")
    assert [c.field for c in parsed.counters] == [
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    ]
    by_field = {c.field: c for c in parsed.counters}
    assert by_field["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"
    assert by_field["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].type == "gauge"  # histogram is served as a gauge
    # a comma inside the help text is kept rather than rejected
    assert (
        by_field["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].help == "Ratio of time the graphics engine is active, as a fraction."
    )
    assert by_field["DCGM_FI_DEV_GPU_UTIL"].help == "GPU utilization (in %)."
    assert parsed.labels == ("DCGM_FI_DRIVER_VERSION",)


def test_fields_it_cannot_serve_are_warnings_naming_the_line() -> None:
    parsed = counters.parse(USER_FILE, "f.csv")
    assert "f.csv:10: DCGM_EXP_GPU_HEALTH_STATUS cannot be served without DCGM (DCGM's health watches" in "".join(
        parsed.warnings
    )
    assert "f.csv:11: DCGM_FI_DEV_NOT_A_FIELD is not a field this collector serves; skipped" in parsed.warnings
    assert any(w.startswith("f.csv:15: DCGM_FI_DEV_SM_CLOCK is listed again") for w in parsed.warnings)
    assert len(parsed.warnings) == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("DCGM_FI_DEV_GPU_UTIL, gauge\n", "f.csv:1: expected 'FIELD, type, help' but found 2 part(s)"),
        ("# ok\nDCGM_FI_DEV_GPU_UTIL gauge help\n", "f.csv:2: expected 'FIELD, type, help' but found 1 part(s)"),
        ("DCGM_FI_DEV_GPU_UTIL, gaugee, help\n", "f.csv:1: unknown type 'gaugee' for DCGM_FI_DEV_GPU_UTIL"),
        ('DCGM_FI_DEV_GPU_UTIL, gauge, "unterminated\n', "f.csv:1: cannot parse"),
        ("# only comments\n\n", "f.csv: no field this collector serves is listed"),
        ("DCGM_EXP_GPU_HEALTH_STATUS, counter, x\n", "f.csv: no field this collector serves is listed"),
    ],
)
def test_malformed_files_fail_naming_file_line_and_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        counters.parse(text, "f.csv")
    assert str(info.value).startswith(message)


def test_missing_and_unreadable_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"counters file .*nope.csv does not exist"):
        counters.load(str(tmp_path / "nope.csv"))
    with pytest.raises(ConfigError, match="cannot be read"):
        counters.load(str(tmp_path))  # a directory
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match=r"bin.csv:1: expected 'FIELD, type, help' but found 1 part"):
        counters.load(str(binary))


def test_files_go_reads_are_read_the_same(tmp_path: Path) -> None:
    # an editor's byte-order mark, a help text in Latin-1, a line separator inside a help text, DCGM 3.3's name
    path = tmp_path / "counters.csv"
    path.write_bytes(
        b"\xef\xbb\xbf# Format\nDCGM_FI_DEV_SM_CLOCK, gauge, SM clock\r\n"
        b"DCGM_FI_DEV_GPU_TEMP, gauge, Temp\xe9rature\n"
        + "DCGM_FI_DEV_MEM_CLOCK, gauge, a\u2028b\x0cc\n".encode()
        + b"DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, Current clock event reasons.\n"
    )
    parsed = counters.load(str(path))
    assert parsed.warnings == ()
    assert [(c.field, c.help) for c in parsed.counters] == [
        ("DCGM_FI_DEV_SM_CLOCK", "SM clock"),
        ("DCGM_FI_DEV_GPU_TEMP", "Temp\ufffdrature"),
        ("DCGM_FI_DEV_MEM_CLOCK", "a\u2028b\x0cc"),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock event reasons."),
    ]
    # the bitmask is served under the name the file lists, as dcgm-exporter serves it
    assert parsed.counters[-1].name == "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"


def test_the_built_in_file_enables_profiling_and_serves_only_known_fields() -> None:
    parsed = counters.load(None)
    assert parsed.warnings == ()
    assert {
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
    } <= parsed.fields
    assert parsed.fields <= set(FIELDS)
    assert parsed.labels == ("DCGM_FI_DRIVER_VERSION",)
