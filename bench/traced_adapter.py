"""The adapter with tracemalloc on, for the soak's search for growth; the product carries no such code.

    python -m bench.traced_adapter SNAPSHOT_DIR EVERY_SECONDS <adapter flags...>

Writes a tracemalloc snapshot (25 frames deep) to SNAPSHOT_DIR/snap-NNN.pickle every EVERY_SECONDS; bench/scale_bench.py
diffs the first against the last.
"""

from __future__ import annotations

import sys
import threading
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def dump(out: Path, every: float) -> None:
    for n in range(10_000):
        time.sleep(every)
        tracemalloc.take_snapshot().dump(str(out / f"snap-{n:03d}.pickle"))


def main() -> None:
    out, every = Path(sys.argv[1]), float(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(25)
    threading.Thread(target=dump, args=(out, every), daemon=True).start()
    from adapter.cli import main as adapter_main

    raise SystemExit(adapter_main(sys.argv[3:]))


if __name__ == "__main__":
    main()
