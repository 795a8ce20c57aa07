"""The replay's step cost, read from the profile measured on the H100 (loadgen/replay/profiles/h100-sxm.json)."""

import json
from pathlib import Path

import pytest

from loadgen.errors import LoadError
from loadgen.replay.cost_model import Model, Table, load_profile

PROFILE = Path(__file__).parents[3] / "loadgen" / "replay" / "profiles" / "h100-sxm.json"


def test_a_table_is_read_between_its_points_and_along_its_last_slope_beyond() -> None:
    table = Table((1.0, 3.0, 5.0), (10.0, 20.0, 40.0))
    assert [table(x) for x in (0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 7.0)] == [10.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0]


def test_the_measured_points_come_back_as_measured() -> None:
    data = json.loads(PROFILE.read_text())
    model = load_profile()
    for tokens, seconds in data["linear_32b"]["seconds"].items():
        assert model.step_seconds(int(tokens), 0, 0) == pytest.approx(seconds)
    # decode attention by the total context: 16 x 4096 and 64 x 1024 are the same 65,536 tokens; the median is read
    same = sorted(data["decode_attention_32b"][k] for k in ("16x4096", "32x2048", "64x1024"))
    assert model.decode_attention(65536) == pytest.approx(same[1])


def test_prefill_attention_grows_with_the_square_of_each_prompt() -> None:
    model = load_profile()
    one = model.step_seconds(4096, 0, 4096**2) - model.step_seconds(4096, 0, 0)
    two = model.step_seconds(8192, 0, 2 * 4096**2) - model.step_seconds(8192, 0, 0)
    assert two - model.prefill_fixed == pytest.approx(2 * (one - model.prefill_fixed))
    data = json.loads(PROFILE.read_text())
    assert one == pytest.approx(data["prefill_attention_32b"]["4096"], rel=0.1)  # the fit, within 10 % there


def test_a_model_of_another_size_scales_the_linear_part_by_its_parameters_and_attention_by_its_kv() -> None:
    base = load_profile()
    data = json.loads(PROFILE.read_text())
    params = data["linear_32b"]["parameters"]
    kv = 2 * 64 * 8 * 128 * 2  # Qwen2.5-32B: 64 layers, 8 KV heads of 128, keys and values in bf16
    half = load_profile(model=Model(params / 2, kv // 4))
    assert half.step_seconds(1, 0, 0) == pytest.approx(base.step_seconds(1, 0, 0) / 2)
    assert half.step_seconds(1, 20000, 0) - half.step_seconds(1, 0, 0) == pytest.approx(
        (base.step_seconds(1, 20000, 0) - base.step_seconds(1, 0, 0)) / 4
    )


def test_a_file_that_is_no_profile_is_refused_with_its_name(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="cannot read the profile"):
        load_profile(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"linear_32b": {}}')
    with pytest.raises(LoadError, match=r"bad\.json: not a profile bench/replay_calibration\.py writes"):
        load_profile(bad)
    bad.write_text("[")
    with pytest.raises(LoadError, match=r"bad\.json: not a profile"):
        load_profile(bad)
