"""``gpuscale-load replay``'s flags and the replay they describe, checked before anything runs: a bad value is one
line naming the flag (argparse), a bad trace, profile or combination a ``LoadError`` naming what is wrong."""

from __future__ import annotations

import argparse
import random
from dataclasses import replace
from pathlib import Path

from ..autoscaling import ControllerConfig
from ..errors import LoadError
from ..serving.arrivals import Arrivals, TokenRange
from ..serving.rate_file import RateSchedule, read_rates
from ..serving.scheduler import Limits
from ..serving.settings import above_zero, at_least, tokens
from .cost_model import Model, load_profile
from .policies import OTHER_POLICIES, POLICIES
from .run import ReplaySpec
from .simulation import Settings
from .trace import Arrival, generated, read_trace, scale_rate

# the default replica: Qwen2.5-32B in bf16 on one H100, as vLLM sizes it: 90 % of the GPU's memory
# (gpu_memory_utilization), less the weights and about 2 GiB of activations, is the KV cache
PARAMETERS_32B = 32.5e9  # the model card's count, embeddings included; the profile measured its layers' 31.2e9
MEMORY_SHARE = 0.9
ACTIVATIONS = 2 * 2**30
D = Settings()


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", type=Path, metavar="FILE",
                        help="arrivals from a CSV in the Azure LLM inference trace format "
                             "(TIMESTAMP,ContextTokens,GeneratedTokens)")  # fmt: skip
    source.add_argument("--rate", type=at_least(0.0), metavar="R", help="Poisson arrivals, R requests a second")
    source.add_argument("--rate-file", type=Path, metavar="FILE",
                        help="Poisson arrivals at a rate that steps: one 'seconds rate' line per step")  # fmt: skip
    add("--seconds", type=above_zero, default=3600.0, help="with --rate or --rate-file: how long (default 3600)")
    add("--sizes-from", type=Path, metavar="TRACE",
        help="with --rate or --rate-file: each request's lengths those of a random request of this trace")  # fmt: skip
    add("--prompt-tokens", type=tokens, default=TokenRange(1024, 1024), metavar="N|LOW-HIGH",
        help="with --rate or --rate-file, without --sizes-from: prompt length (default 1024)")  # fmt: skip
    add("--output-tokens", type=tokens, default=TokenRange(200, 200), metavar="N|LOW-HIGH",
        help="with --rate or --rate-file, without --sizes-from: tokens to generate (default 200)")  # fmt: skip
    add("--rate-scale", type=above_zero, default=1.0, metavar="X",
        help="X times the arrival rate, the trace's shape and lengths kept (default 1)")  # fmt: skip
    add("--seed", type=at_least(0, int), default=0, help="seeds the generators and --rate-scale's copies")
    add("--policies", default="", metavar="NAME,...",
        help="the policies to compare (default all: " + ", ".join(p.name for p in POLICIES) + ")")  # fmt: skip
    add("--ttft-objective", type=above_zero, default=D.ttft_objective, metavar="SECONDS",
        help=f"the time to first token a request should have (default {D.ttft_objective:g})")  # fmt: skip
    add("--slo-attainment", type=above_zero, default=0.99, metavar="SHARE",
        help="the share of requests that must meet it, 0-1 (default 0.99)")  # fmt: skip
    add("--cold-start", type=at_least(0.0), default=D.cold_start, metavar="SECONDS",
        help=f"a new pod's time to serve, costing its GPU (default {D.cold_start:g})")  # fmt: skip
    add("--grace", type=at_least(0.0), default=D.grace, metavar="SECONDS",
        help=f"a deleted pod's time to drain (terminationGracePeriodSeconds; default {D.grace:g})")  # fmt: skip
    add("--scrape-interval", type=above_zero, default=D.scrape_interval, metavar="SECONDS",
        help=f"Prometheus' scrape interval (default {D.scrape_interval:g})")  # fmt: skip
    add("--flow-control", action="store_true",
        help="the gateway holds requests while every ready engine is saturated (5 waiting or 80 %% of its KV cache), "
             "as llm-d's endpoint picker does, instead of queueing them in the engines")  # fmt: skip
    add("--sync-period", type=above_zero, default=D.controller.sync_period, metavar="SECONDS",
        help=f"the HPA controller's sync period (default {D.controller.sync_period:g})")  # fmt: skip
    add("--max-replicas", type=at_least(1, int), default=None, metavar="N",
        help="every policy's replica cap (default: twice the clairvoyant bound's peak, at least 64)")  # fmt: skip
    add(
        "--min-replicas",
        type=at_least(0, int),
        default=0,
        metavar="N",
        help="a floor of N replicas for every autoscaled policy besides its own: what a minimum buys (default 0)",
    )
    add("--profile", type=Path, metavar="FILE",
        help="step costs measured by bench/replay_calibration.py (default: the H100's, shipped)")  # fmt: skip
    add("--model-params", type=above_zero, metavar="BILLIONS",
        help="the served model's parameters: scales the 32B profile's linear layers (default 32.5)")  # fmt: skip
    add("--kv-bytes-per-token", type=at_least(1, int), metavar="N",
        help="the served model's KV cache per token (default Qwen2.5-32B's 262144)")  # fmt: skip
    add("--kv-tokens", type=at_least(1, int), metavar="N",
        help="a replica's KV cache in tokens (default: 90 %% of the profile GPU's memory less the weights and "
             "2 GiB, over --kv-bytes-per-token)")  # fmt: skip
    add("--max-batch", type=at_least(1, int), default=256, help="most requests running at once (default 256)")
    add("--max-step-tokens", type=at_least(1, int), default=16384, metavar="N",
        help="most tokens in one step (default 16384)")  # fmt: skip
    add("--workers", type=at_least(1, int), metavar="N", help="policies replayed at once (default: 2, or 1 core)")
    add("--json", type=Path, metavar="FILE", help="write the table's rows here as JSON")
    add("--png", type=Path, metavar="FILE", help="draw replicas against demand, a panel per policy")
    add("--manifest", type=Path, metavar="FILE", help="write the best policy that meets the objective, to apply")
    add("--namespace", default="default", help="the manifest's namespace (default default)")
    add("--deployment", default="vllm", help="the Deployment the manifest scales (default vllm)")


def spec_from(args: argparse.Namespace) -> ReplaySpec:
    if args.slo_attainment > 1:
        raise LoadError(f"--slo-attainment is a share from 0 to 1, got {args.slo_attainment:g}")
    if args.trace is not None and args.sizes_from is not None:
        raise LoadError("--sizes-from goes with --rate or --rate-file; a --trace has its own lengths")
    cost = load_profile(args.profile)
    params = PARAMETERS_32B if args.model_params is None else args.model_params * 1e9
    kv_bytes = args.kv_bytes_per_token or cost.measured.kv_bytes_per_token
    # the profile measured the 32B model's layers: another model's are in the same proportion to its whole count
    cost = cost.sized(Model(cost.measured.parameters * params / PARAMETERS_32B, kv_bytes))
    kv_tokens = args.kv_tokens or default_kv_tokens(cost.gpu_memory_bytes, params, kv_bytes)
    limits = Limits(args.max_batch, kv_tokens, args.max_step_tokens)
    if limits.max_batch > limits.max_step_tokens:
        raise LoadError(f"--max-batch {limits.max_batch} is more than --max-step-tokens {limits.max_step_tokens}")
    arrivals, source = _arrivals(args)
    longest = min(limits.kv_tokens, limits.max_step_tokens)
    fitting = tuple(a for a in arrivals if max(1, a.prompt) + max(1, a.output) <= longest)
    if len(fitting) < len(arrivals):
        source += (f"; {len(arrivals) - len(fitting):,} longer than {longest:,} tokens left out (an engine refuses "
                   "them)")  # fmt: skip
    if not fitting:
        raise LoadError(f"no request to replay: {source}")
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    known = {p.name: p for p in (*POLICIES, *OTHER_POLICIES)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise LoadError(f"--policies: no policy {unknown[0]!r} (known: {', '.join(known)})")
    policies = tuple(known[n] for n in names) if names else POLICIES
    settings = Settings(args.cold_start, args.grace, args.scrape_interval, args.ttft_objective, limits,
                        replace(ControllerConfig(), sync_period=args.sync_period),
                        flow_control=args.flow_control)  # fmt: skip
    if args.max_replicas is not None and args.min_replicas > args.max_replicas:
        raise LoadError(f"--min-replicas {args.min_replicas} is above --max-replicas {args.max_replicas}")
    spec = ReplaySpec(fitting, source, settings, cost, policies, args.slo_attainment, args.max_replicas,
                      args.min_replicas)  # fmt: skip
    return replace(spec, workers=args.workers) if args.workers else spec


def default_kv_tokens(gpu_memory: float, parameters: float, kv_bytes: int) -> int:
    free = MEMORY_SHARE * gpu_memory - 2 * parameters - ACTIVATIONS
    if free < kv_bytes * 1024:
        raise LoadError(f"a model of {parameters / 1e9:g} B parameters in bf16 leaves no KV cache on a GPU of "
                        f"{gpu_memory / 2**30:.0f} GiB: give --kv-tokens")  # fmt: skip
    return int(free // kv_bytes)


def _arrivals(args: argparse.Namespace) -> tuple[list[Arrival], str]:
    if args.trace is not None:
        arrivals = read_trace(args.trace)
        source = str(args.trace)
    else:
        rates = RateSchedule.constant(args.rate) if args.rate is not None else read_rates(args.rate_file)
        arrivals = generated(Arrivals(rates, args.prompt_tokens, args.output_tokens, args.seed), args.seconds)
        source = f"Poisson at {args.rate:g}/s" if args.rate is not None else f"Poisson at {args.rate_file}'s rates"
        if args.sizes_from is not None:
            sizes = read_trace(args.sizes_from)
            rng = random.Random(args.seed)
            arrivals = [Arrival(a.at, *(lambda s: (s.prompt, s.output))(rng.choice(sizes))) for a in arrivals]
            source += f", lengths from {args.sizes_from}"
    if args.rate_scale != 1:
        arrivals = scale_rate(arrivals, args.rate_scale, args.seed)
        source += f", x{args.rate_scale:g} rate"
    if not arrivals:
        raise LoadError(f"no request arrives: {source}")
    return arrivals, source
