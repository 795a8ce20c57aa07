"""Two traces in the Azure LLM inference trace format, made from another such trace, that no policy was shaped on:

- ``code-like.csv``: the same arrivals with prompts twice as long (at most 8,000 tokens) and outputs a tenth as long
  (at least 1), the shape of the Azure 2023 code trace (long contexts, short completions), where a replica's KV
  cache fills with prompts and turns over fast;
- ``folded.csv``: the same requests with each ten minutes' arrivals squeezed into that block's first two minutes,
  then eight quiet ones: real arrivals in bursts five times the trace's rate after silence.

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


def folded(rows: Iterable[Row]) -> list[Row]:
    out = []
    for t, prompt, output in rows:
        block, within = divmod(t, BLOCK)
        out.append((block * BLOCK + within / SQUEEZE, prompt, output))
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
    parser.add_argument("out", type=Path, help="the directory to write code-like.csv and folded.csv to")
    args = parser.parse_args()
    start, rows = read(args.trace)
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out / "code-like.csv", start, code_like(rows))
    write(args.out / "folded.csv", start, folded(rows))
    print(f"{len(rows):,} requests each: {args.out / 'code-like.csv'}, {args.out / 'folded.csv'}")


if __name__ == "__main__":
    main()
