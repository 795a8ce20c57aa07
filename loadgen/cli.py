"""``gpuscale-load``: run a GPU load (``run``), run one and check the collector's metrics follow it (``validate``),
load the GPU as a continuously batching inference engine would, with vLLM's metrics (``serve``), or replay an
arrival trace through autoscaling policies in virtual time and compare what each costs and serves (``replay``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from common.flags import package_version, plain

from .duty_file import DutyFile
from .errors import LoadError
from .replay import __doc__ as replay_doc
from .replay import flags as replay_flags
from .runner import LoadSpec, run_load
from .serving import __doc__ as serving_doc
from .serving import settings as serving
from .validate import read_gpu_series, validate
from .workloads import KINDS


def _duty(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"duty must be in (0, 1], got {value}")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return value


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", choices=sorted(KINDS), default="gemm-bf16", help="what to keep busy")
    parser.add_argument("--seconds", type=_positive, default=30.0, help="how long to run")
    parser.add_argument("--duty", type=_duty, default=1.0, help="busy fraction of each period, (0, 1]")
    parser.add_argument("--period", type=_positive, default=0.1, help="duty-cycle period in seconds")
    parser.add_argument("--size", type=int, default=8192, help="matrix side or vector scale")
    parser.add_argument("--gpu", type=int, default=0, help="CUDA device index")


def spec_from(args: argparse.Namespace) -> LoadSpec:
    return LoadSpec(
        kind=args.kind, seconds=args.seconds, duty=args.duty, size=args.size, gpu=args.gpu, period=args.period
    )


class Parser(argparse.ArgumentParser):
    """A bad flag is one line on stderr and exit 2, where argparse would print the whole usage before it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = Parser(prog="gpuscale-load", description=plain(__doc__))
    parser.add_argument("--version", action="version", version=f"gpuscale-load version {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a load and print progress")
    add_load_arguments(run)
    run.add_argument("--duty-file", type=Path, help="read the duty (0 to 1) from this file at every period, "
                     "whenever it changes: another program steers the load (instead of --duty)")  # fmt: skip
    check = sub.add_parser("validate", help="run a load and check the collector's series follow it")
    add_load_arguments(check)
    check.add_argument("--metrics-url", default="http://127.0.0.1:9400/metrics", help="the collector's /metrics")
    check.add_argument("--idle-seconds", type=_positive, default=8.0, help="idle sampling before the load")
    batching = sub.add_parser("serve", help="a continuously batching inference engine's load, with vLLM's /metrics",
                              description=plain(serving_doc))  # fmt: skip
    serving.add_serve_arguments(batching)
    replaying = sub.add_parser("replay", help="autoscaling policies over an arrival trace, against the clairvoyant "
                               "bound", description=plain(replay_doc))  # fmt: skip
    replay_flags.add_replay_arguments(replaying)
    args = parser.parse_args(argv)
    try:
        if args.command == "replay":
            from .replay.main import replay_command  # the simulation's modules, only for the command that runs it

            sys.exit(replay_command(replay_flags.spec_from(args), args))
        if args.command == "serve":
            from .serving.run import serve  # the server's libraries, only for the command that serves

            print(json.dumps(serve(serving.spec_from(args), progress=sys.stderr)))
        elif args.command == "run":
            duty = DutyFile(args.duty_file) if args.duty_file else None
            print(json.dumps(run_load(spec_from(args), progress=sys.stderr, duty=duty)))
        else:
            try:
                read_gpu_series(args.metrics_url, str(args.gpu))
            except OSError as e:
                raise LoadError(f"cannot read {args.metrics_url}: {e}") from e
            verdict = validate(spec_from(args), args.metrics_url, idle_seconds=args.idle_seconds)
            print(verdict.table())
            sys.exit(0 if verdict.ok else 1)
    except LoadError as e:
        print(f"gpuscale-load: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C ends a load without a traceback (serve stops its engine cleanly itself)
        sys.exit(130)
