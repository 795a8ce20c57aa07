"""``gpuscale-load replay`` as a user runs it: a short trace through two policies, its table, JSON and manifest, and
its errors as one line each."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

TRACE = """TIMESTAMP,ContextTokens,GeneratedTokens
""" + "".join(f"2023-11-16 18:{m:02d}:{s:02d}.5,{300 + 7 * (m * 60 + s) % 900},{20 + (m * 60 + s) % 150}\n"
              for m in range(0, 4) for s in range(0, 60, 2))  # fmt: skip


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadgen", "replay", *args], capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip


def test_a_trace_through_two_policies_gives_their_rows_the_bound_and_the_best_manifest(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    out = replay("--trace", str(trace), "--policies", "gpuscale,kserve", "--workers", "1", "--json",
                 str(tmp_path / "rows.json"), "--manifest", str(tmp_path / "best.yaml"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "| gpuscale |" in out.stdout
    assert "| clairvoyant bound |" in out.stdout
    assert "every policy capped at 64 replicas" in out.stdout  # twice the bound's peak is fewer
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [r["policy"] for r in rows] == ["gpuscale", "kserve", "static-peak", "clairvoyant bound"]
    for r in rows:
        assert r["requests"] == 120  # a request every 2 s for 4 minutes
        assert {"gpu_seconds", "bound_gpu_seconds", "slo_attainment", "ttft_p99_seconds", "requests_cut"} <= set(r)
        assert r["bound_gpu_seconds"] == rows[-1]["gpu_seconds"]
    best = out.stdout.split("best policy that meets the objective: ")[1].split(" ")[0]
    manifest = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert manifest["metadata"]["name"] == "vllm"
    assert best in (tmp_path / "best.yaml").read_text().splitlines()[0]


def test_a_cap_given_is_every_policys_and_the_forecast_is_replayed_with_a_yesterday(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    out = replay("--trace", str(trace), "--policies", "gpuscale-forecast", "--workers", "1", "--max-replicas", "3",
                 "--json", str(tmp_path / "rows.json"))  # fmt: skip
    assert out.returncode in (0, 1), out.stderr
    assert "every policy capped at 3 replicas" in out.stdout
    [forecast, *_] = json.loads((tmp_path / "rows.json").read_text())
    assert forecast["policy"] == "gpuscale-forecast"
    assert forecast["peak_replicas"] <= 3
    # both passes say how far they are: yesterday's, then the day replayed
    progress = [line for line in out.stderr.splitlines() if line.startswith("replay: gpuscale-forecast")]
    assert progress[0].startswith("replay: gpuscale-forecast (yesterday): 1 of 4 minutes"), out.stderr
    assert progress[-1].startswith("replay: gpuscale-forecast: "), out.stderr


def test_errors_are_one_line_naming_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,x,1\n")
    cases = [
        (["--trace", str(bad)], f"{bad}:2: ContextTokens must be a whole number of tokens, got 'x'"),
        (["--rate", "1", "--slo-attainment", "2"], "--slo-attainment is a share from 0 to 1, got 2"),
        (["--rate", "1", "--policies", "hpa-of-mine"], "--policies: no policy 'hpa-of-mine'"),
        (["--rate", "1", "--rate-scale", "0"], "argument --rate-scale: must be above 0, got 0"),
        (["--trace", str(bad), "--sizes-from", str(bad)], "--sizes-from goes with --rate or --rate-file"),
    ]
    for args, message in cases:
        out = replay(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert message in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
