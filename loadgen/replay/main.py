"""``gpuscale-load replay``: run the replay the flags describe and write what was asked."""

from __future__ import annotations

import argparse
import sys
import time

from .report import table, write_json, write_manifest, write_png
from .run import ReplaySpec, replay


def replay_command(spec: ReplaySpec, args: argparse.Namespace) -> int:
    """0 when some policy meets the objective, 1 when none does."""
    started = time.monotonic()
    report = replay(spec)
    print(table(report), end="")
    print(f"replay: {time.monotonic() - started:.0f} s", file=sys.stderr)
    if args.json is not None:
        write_json(report, args.json)
    if args.png is not None:
        write_png(report, args.png)
    if args.manifest is not None and not write_manifest(report, args.manifest, args.namespace, args.deployment):
        print("replay: no policy meets the objective: no manifest written", file=sys.stderr)
    return 0 if report.best() is not None else 1
