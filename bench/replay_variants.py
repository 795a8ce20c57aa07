"""Two traces in the Azure LLM inference trace format, made from another such trace, that no policy was shaped on:

- ``code-like.csv``: the same arrivals with prompts twice as long (at most 8,000 tokens) and outputs a tenth as long
  (at least 1), the shape of the Azure 2023 code trace (long contexts, short completions), where a replica's KV
  cache fills with prompts and turns over fast;
- ``folded.csv``: the same requests with each ten minutes' arrivals squeezed into that block's first two minutes,
  then eight quiet ones: real arrivals in bursts five times the trace's rate after silence;
- ``on-off.csv``: each three minutes' arrivals squeezed into that block's first minute: bursts three times the
  trace's rate, with pauses shorter than any scale-down window;
- ``spiky.csv``: of each five minutes' arrivals, every other request keeps its time and the rest come within the
  block's first 30 seconds: a spike of 5.5 times the trace's rate, shorter than a cold start, over half its rate.

    python -m bench.replay_variants TRACE OUT_DIR
    gpuscale-load replay --trace OUT_DIR/folded.csv --rate-scale 10 ...

The timestamps keep the source's format (microseconds written, as Python writes them).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
from collections.abc import Iterable
from pathlib import Path

Row = tuple[float, int, int]  # seconds from the first request, context tokens, generated tokens
FORMAT = "%Y-%m-%d %H:%M:%S.%f"
LONGEST_PROMPT = 8000
BLOCK, SQUEEZE = 600.0, 5.0  # each 10 minutes' arrivals within its first 2
ON_OFF_BLOCK, ON_OFF_SQUEEZE = 180.0, 3.0  # each 3 minutes' arrivals within its first 1
SPIKE_BLOCK, SPIKE = 300.0, 30.0  # half of each 5 minutes' arrivals within its first 30 seconds


def parse_time(text: str) -> dt.datetime:
    # the Azure files write seven fractional digits; strptime reads at most six
    head, _, fraction = text.strip().partition(".")
    return dt.datetime.strptime(f"{head}.{(fraction or '0')[:6]}", FORMAT)


def read(path: Path) -> tuple[dt.datetime, list[Row]]:
    with path.open(newline="") as f:
        records = list(csv.DictReader(f))
    if not records:
        raise SystemExit(f"{path}: no requests")
    start = parse_time(records[0]["TIMESTAMP"])
    rows = [
        ((parse_time(r["TIMESTAMP"]) - start).total_seconds(), int(r["ContextTokens"]), int(r["GeneratedTokens"]))
        for r in records
    ]
    return start, rows


def code_like(rows: Iterable[Row]) -> list[Row]:
    return [(t, min(LONGEST_PROMPT, 2 * prompt), max(1, output // 10)) for t, prompt, output in rows]


def folded(rows: Iterable[Row], block: float = BLOCK, squeeze: float = SQUEEZE) -> list[Row]:
    out = []
    for t, prompt, output in rows:
        start, within = divmod(t, block)
        out.append((start * block + within / squeeze, prompt, output))
    return sorted(out)


def spiky(rows: Iterable[Row]) -> list[Row]:
    out = []
    for n, (t, prompt, output) in enumerate(rows):
        if n % 2 == 0:
            out.append((t, prompt, output))
        else:
            start, within = divmod(t, SPIKE_BLOCK)
            out.append((start * SPIKE_BLOCK + within * SPIKE / SPIKE_BLOCK, prompt, output))
    return sorted(out)


def write(path: Path, start: dt.datetime, rows: Iterable[Row]) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for t, prompt, output in rows:
            out.writerow([(start + dt.timedelta(seconds=t)).strftime(FORMAT), prompt, output])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "trace", type=Path, help="a trace in the Azure format (TIMESTAMP,ContextTokens,GeneratedTokens)"
    )
    parser.add_argument("out", type=Path, help="the directory to write the variants to")
    args = parser.parse_args()
    start, rows = read(args.trace)
    args.out.mkdir(parents=True, exist_ok=True)
    variants = {
        "code-like.csv": code_like(rows),
        "folded.csv": folded(rows),
        "on-off.csv": folded(rows, ON_OFF_BLOCK, ON_OFF_SQUEEZE),
        "spiky.csv": spiky(rows),
    }
    for name, variant in variants.items():
        write(args.out / name, start, variant)
    print(f"{len(rows):,} requests each: {', '.join(str(args.out / name) for name in variants)}")


if __name__ == "__main__":
    main()
