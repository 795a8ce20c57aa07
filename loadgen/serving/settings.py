"""``gpuscale-load serve``'s flags and the settings they give, checked before anything starts.

A flag's own value is checked as argparse reads it; what depends on several flags (the longest request fitting the
KV cache and a step, the simulated step's flags only with ``--simulate``, the rate file's content) is checked in
``spec_from``, which raises ``LoadError`` naming the flags.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import LoadError
from .arrivals import TokenRange
from .rate_file import RateSchedule, read_rates
from .scheduler import Limits
from .steps import StepCost

# the GEMM chain's defaults: about the weight traffic of a model of 4 billion parameters per step
HIDDEN = 8192
LAYERS = 64
PROMPT = TokenRange(256, 256)
OUTPUT = TokenRange(128, 128)
LIMITS = Limits()
COST = StepCost()
GPU_FLAGS = ("hidden", "layers", "gpu")
SIM_FLAGS = ("sim_step_ms", "sim_token_ms")


@dataclass(frozen=True)
class ServeSpec:
    rates: RateSchedule
    seconds: float = 60.0
    prompt: TokenRange = PROMPT
    output: TokenRange = OUTPUT
    seed: int = 0
    limits: Limits = LIMITS
    simulate: bool = False
    cost: StepCost = COST
    hidden: int = HIDDEN
    layers: int = LAYERS
    gpu: int = 0
    host: str = "0.0.0.0"
    port: int = 8000
    model_name: str = "toy-batching-model"
    interval: float = 5.0


def at_least(low: float, kind: type[int] | type[float] = float) -> Callable[[str], float]:
    """An argparse type: a number of ``kind`` no less than ``low``, with a message that says so."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'a whole number' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None  # fmt: skip
        if not math.isfinite(value) or value < low:
            raise argparse.ArgumentTypeError(f"must be {low:g} or more, got {text}")
        return value

    return parse


def above_zero(text: str) -> float:
    value = at_least(0.0)(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def port(text: str) -> int:
    value = int(at_least(1, int)(text))
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be 65535 or less, got {text}")
    return value


def tokens(text: str) -> TokenRange:
    try:
        return TokenRange.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    d = ServeSpec(RateSchedule.constant(0))
    rate = parser.add_mutually_exclusive_group(required=True)
    rate.add_argument(
        "--rate", type=at_least(0), metavar="R", help="requests per second, arriving as a Poisson process"
    )
    rate.add_argument(
        "--rate-file", type=Path, metavar="FILE", help="the rate over time: lines 'seconds rate', from that second on"
    )
    add = parser.add_argument
    add("--seconds", type=above_zero, metavar="S", default=d.seconds, help=f"how long to run (default {d.seconds:g})")
    add(
        "--prompt-tokens",
        type=tokens,
        metavar="N|LOW-HIGH",
        default=d.prompt,
        help=f"prompt length: N or LOW-HIGH (default {d.prompt})",
    )
    add(
        "--output-tokens",
        type=tokens,
        metavar="N|LOW-HIGH",
        default=d.output,
        help=f"tokens to generate: N or LOW-HIGH (default {d.output})",
    )
    add(
        "--seed",
        type=at_least(0, int),
        metavar="N",
        default=d.seed,
        help="seeds arrivals and lengths: a seed repeats a run",
    )
    limits = d.limits
    add("--max-batch", type=at_least(1, int), metavar="N", default=limits.max_batch,
        help=f"most requests running at once (vLLM's max_num_seqs; default {limits.max_batch})")  # fmt: skip
    add("--kv-tokens", type=at_least(1, int), metavar="N", default=limits.kv_tokens,
        help=f"KV cache size in tokens (default {limits.kv_tokens})")  # fmt: skip
    add("--max-step-tokens", type=at_least(1, int), metavar="N", default=limits.max_step_tokens,
        help=f"most tokens in one step (vLLM's max_num_batched_tokens; default {limits.max_step_tokens})")  # fmt: skip
    add("--simulate", action="store_true", help="no GPU: each step takes a modelled time (same scheduler, metrics)")
    add(
        "--sim-step-ms",
        type=at_least(0),
        metavar="MS",
        help=f"with --simulate: a step's fixed ms (default {1000 * COST.fixed:g})",
    )
    add("--sim-token-ms", type=at_least(0), metavar="MS",
        help=f"with --simulate: ms per token computed (default {1000 * COST.per_token:g})")  # fmt: skip
    add("--hidden", type=at_least(1, int), metavar="N", help=f"the GEMM chain's width (default {HIDDEN})")
    add("--layers", type=at_least(1, int), metavar="N", help=f"matrix products per step (default {LAYERS})")
    add("--gpu", type=at_least(0, int), metavar="N", help="CUDA device index (default 0)")
    add("--host", default=d.host, help=f"address /metrics listens on (default {d.host})")
    add("--port", type=port, metavar="N", default=d.port, help=f"port of /metrics (default {d.port})")
    add(
        "--model-name",
        default=d.model_name,
        metavar="NAME",
        help=f"model_name label of the series (default {d.model_name})",
    )
    add(
        "--interval",
        type=above_zero,
        default=d.interval,
        help=f"seconds between progress lines (default {d.interval:g})",
    )


def spec_from(args: argparse.Namespace) -> ServeSpec:
    """The settings of ``args``; LoadError for flags that do not go together or a bad rate file."""
    given = [f"--{name.replace('_', '-')}" for name in (GPU_FLAGS if args.simulate else SIM_FLAGS)
             if getattr(args, name) is not None]  # fmt: skip
    if given:
        raise LoadError(f"{given[0]} " + ("has no effect with --simulate" if args.simulate else "needs --simulate"))
    limits = Limits(args.max_batch, args.kv_tokens, args.max_step_tokens)
    check_fits(args.prompt_tokens, args.output_tokens, limits)
    rates = RateSchedule.constant(args.rate) if args.rate is not None else read_rates(args.rate_file)
    cost = StepCost(
        COST.fixed if args.sim_step_ms is None else args.sim_step_ms / 1000,
        COST.per_token if args.sim_token_ms is None else args.sim_token_ms / 1000,
    )
    return ServeSpec(
        rates, args.seconds, args.prompt_tokens, args.output_tokens, args.seed, limits, args.simulate, cost,
        hidden=args.hidden or HIDDEN, layers=args.layers or LAYERS, gpu=args.gpu or 0, host=args.host,
        port=args.port, model_name=args.model_name, interval=args.interval,
    )  # fmt: skip


def check_fits(prompt: TokenRange, output: TokenRange, limits: Limits) -> None:
    """The longest request must fit the KV cache and one step, or it could never run: vLLM refuses a request longer
    than its context, and a preempted request computes its prompt and output so far again in one step."""
    longest = prompt.high + output.high
    what = f"the longest request ({prompt.high} prompt + {output.high} output tokens)"
    if longest > limits.kv_tokens:
        raise LoadError(f"{what} does not fit --kv-tokens {limits.kv_tokens}")
    if longest > limits.max_step_tokens:
        raise LoadError(f"{what} does not fit --max-step-tokens {limits.max_step_tokens}")
    if limits.max_batch > limits.max_step_tokens:
        raise LoadError(f"--max-batch {limits.max_batch} is more than --max-step-tokens {limits.max_step_tokens}: "
                        "a full batch decodes a token each per step")  # fmt: skip
