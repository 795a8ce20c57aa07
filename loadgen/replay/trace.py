"""The requests a replay serves: read from a trace in the Azure LLM inference trace format, or made by ``serve``'s
Poisson and rate-file generators, and scaled in rate.

The format is a CSV with the header ``TIMESTAMP,ContextTokens,GeneratedTokens`` (the Azure Public Dataset's "Azure
LLM inference trace 2023", CC-BY 4.0): a row a request, its arrival time (``2023-11-16 18:15:46.6805900``) and its
prompt and output lengths in tokens. Rows may come in any order; times are made relative to the first arrival.
The file is read once, strictly: every error names the file, the line and what is wrong there.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..errors import LoadError
from ..serving.arrivals import Arrivals

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
# a length longer than this is a broken row, not a request: the longest context of any engine today is 10M tokens
LONGEST = 10_000_000
# copies of a request made by --rate-scale take their sizes from a request this many rows around it, so the sizes
# follow the trace's own drift without repeating one request's
NEIGHBOURS = 50


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds from the first arrival
    prompt: int  # tokens
    output: int  # tokens


def read_trace(path: Path) -> list[Arrival]:
    """The trace's requests in arrival order; ``LoadError`` naming the file and line of the first bad row."""
    try:
        with path.open(newline="", encoding="utf-8") as f:
            return parse_trace(f, str(path))
    except OSError as e:
        raise LoadError(f"cannot read the trace {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise LoadError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def parse_trace(lines: Iterable[str], source: str) -> list[Arrival]:
    rows = csv.reader(lines)
    header = next(rows, None)
    if header is None:
        raise LoadError(f"{source}: empty; expected the header {','.join(COLUMNS)}")
    names = [h.strip() for h in header]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise LoadError(f"{source}:1: the header has no {', '.join(missing)} (expected {','.join(COLUMNS)})")
    at, prompt, output = (names.index(c) for c in COLUMNS)
    found: list[tuple[datetime, int, int]] = []
    for row in rows:
        where = f"{source}:{rows.line_num}"
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(names):
            raise LoadError(f"{where}: expected {len(names)} fields, got {len(row)}")
        found.append((_time(row[at], where), _tokens(row[prompt], COLUMNS[1], where),
                      _tokens(row[output], COLUMNS[2], where)))  # fmt: skip
    if not found:
        raise LoadError(f"{source}: no request after the header")
    found.sort(key=lambda r: r[0])
    first = found[0][0]
    return [Arrival((t - first).total_seconds(), p, o) for t, p, o in found]


def _time(text: str, where: str) -> datetime:
    try:
        # Python 3.11's fromisoformat reads the trace's 7 fractional digits (the seventh is dropped: 100 ns)
        return datetime.fromisoformat(text.strip())
    except ValueError:
        raise LoadError(f"{where}: TIMESTAMP must be a date and time such as 2023-11-16 18:15:46.68, "
                        f"got {text[:40]!r}") from None  # fmt: skip


def _tokens(text: str, column: str, where: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise LoadError(f"{where}: {column} must be a whole number of tokens, got {text[:40]!r}") from None
    if not 0 <= value <= LONGEST:
        raise LoadError(f"{where}: {column} must be from 0 to {LONGEST:,} tokens, got {value}")
    return value


def scale_rate(arrivals: Sequence[Arrival], scale: float, seed: int = 0) -> list[Arrival]:
    """The same trace at ``scale`` times its rate: every minute of it has about ``scale`` times the requests, over the
    same hour, with the sizes of the requests around them.

    Above 1 each request is kept and followed by ``floor(scale) - 1`` copies (one more with probability
    ``scale - floor(scale)``), each at a time drawn uniformly between the request and the next one, so a burst stays
    a burst and a lull a lull, and each with the prompt and output lengths of a request drawn from the
    ``NEIGHBOURS`` rows around it. Below 1 each request is kept with probability ``scale``. Seeded: the same seed,
    the same requests.
    """
    if not scale > 0 or math.isinf(scale):
        raise LoadError(f"--rate-scale must be a positive number, got {scale}")
    rng = random.Random(seed)
    if scale <= 1:
        return [a for a in arrivals if rng.random() < scale]
    whole, part = divmod(scale, 1)
    out: list[Arrival] = []
    for i, a in enumerate(arrivals):
        out.append(a)
        gap = arrivals[i + 1].at - a.at if i + 1 < len(arrivals) else 0.0
        copies = int(whole) - 1 + (rng.random() < part)
        for _ in range(copies):
            j = min(len(arrivals) - 1, max(0, i + rng.randint(-NEIGHBOURS, NEIGHBOURS)))
            out.append(Arrival(a.at + rng.random() * gap, arrivals[j].prompt, arrivals[j].output))
    out.sort(key=lambda r: r.at)
    return out


def generated(arrivals: Arrivals, seconds: float) -> list[Arrival]:
    """The requests ``serve``'s generator (a Poisson process at a constant rate or a rate file's) makes in
    ``seconds``."""
    return [Arrival(r.arrival, r.prompt, r.output) for r in arrivals.due(seconds)]
