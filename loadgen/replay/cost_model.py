"""What one engine step costs a replica, in seconds, from a profile measured on a GPU (``bench/replay_calibration.py``).

A step computes some prompts whole (prefill) and one token for each other running request (decode). Its time is the
sum of three parts, each read from the profile's tables:

- the linear layers, for all the step's tokens: the table of the 32B model's layers measured for 1 to 8192 tokens,
  read between its points (piecewise linear; beyond the last point, the last segment's slope). Flat up to about 128
  tokens (the step reads the weights once: bound by memory bandwidth), then about linear (bound by the tensor cores).
- decode attention, for the decoding requests' KV: measured for batches of 1 to 64 requests of 256 to 4096 tokens of
  context, it depends on the total of the contexts (16 x 4096, 32 x 2048 and 64 x 1024 took 5.77, 5.81 and 5.94 ms on
  the H100), so it is read from the totals measured the same way.
- prefill attention, for the prompts: a fixed part (launching 64 layers' kernels) and a part that grows with the square
  of each prompt (causal attention's work), fitted to the measured prompts of 1024 tokens and more.

A model of another size (``--model-params``) scales the linear part by its parameters (a step reads each weight once
and does two FLOPs per weight and token, so both its bandwidth-bound and its compute-bound time scale with them), and
attention by the KV bytes of a token (``--kv-bytes-per-token``). The scaling was checked on the H100 against the
serve step's GEMM chain: the 32B layers' time predicted from the chain's bandwidth and tensor rate came within 0.91
to 1.27 of the time measured (docs/results/replay-calibration.md).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import LoadError

DEFAULT_PROFILE = "h100-sxm.json"
# the smallest prompt whose attention the square fit is made from: below it the fixed part dominates
FIT_FROM = 1024


@dataclass(frozen=True)
class Table:
    """A function known at points, read between them; beyond the last, the last segment's slope."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    def __call__(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        if x <= xs[0]:
            return ys[0]
        i = min(bisect.bisect_left(xs, x), len(xs) - 1)
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1])


@dataclass(frozen=True)
class Model:
    """The size of the model a replica serves: what scales the profile's times."""

    parameters: float  # in the linear layers
    kv_bytes_per_token: int


@dataclass(frozen=True)
class CostModel:
    linear: Table  # tokens -> seconds
    decode_attention: Table  # total context tokens of the decoding requests -> seconds
    prefill_fixed: float  # seconds, once a step that computes prompts
    prefill_per_square: float  # seconds per prompt token squared
    measured: Model = Model(1.0, 1)  # the model the profile measured, which the scales are relative to
    gpu_memory_bytes: int = 0  # the profile's GPU's
    linear_scale: float = 1.0
    attention_scale: float = 1.0
    source: str = ""  # the profile's GPU and date, for the report
    # the linear part by tokens: a replay asks for the same few hundred batch sizes millions of times
    _linear: dict[int, float] = field(default_factory=dict, compare=False, repr=False)

    def sized(self, model: Model) -> CostModel:
        """The same GPU serving ``model``: the linear layers scaled by its parameters, attention by its KV bytes."""
        linear = model.parameters / self.measured.parameters
        attention = model.kv_bytes_per_token / self.measured.kv_bytes_per_token
        return replace(self, linear_scale=linear, attention_scale=attention, _linear={})

    def step_seconds(self, tokens: int, decode_context: int, prompt_squares: int) -> float:
        """A step of ``tokens`` tokens in all, whose decoding requests hold ``decode_context`` tokens of KV between
        them and whose prompts' squares add up to ``prompt_squares``."""
        seconds = self._linear.get(tokens)
        if seconds is None:
            seconds = self._linear[tokens] = self.linear(tokens) * self.linear_scale
        attention = self.decode_attention(decode_context) if decode_context else 0.0
        if prompt_squares:
            attention += self.prefill_per_square * prompt_squares
            if not decode_context:
                attention += self.prefill_fixed
        return seconds + attention * self.attention_scale


def load_profile(path: Path | None = None, model: Model | None = None) -> CostModel:
    """The cost model of the profile at ``path`` (the shipped H100 profile when None), for ``model`` (the profile's
    own 32B model when None); ``LoadError`` naming the file and what is missing."""
    name = str(path) if path else DEFAULT_PROFILE
    try:
        if path is None:
            text = resources.files(__package__).joinpath("profiles", DEFAULT_PROFILE).read_text()
        else:
            text = path.read_text()
        data = json.loads(text)
        return _cost_model(data, name, model)
    except OSError as e:
        raise LoadError(f"cannot read the profile {name}: {e.strerror or e}") from None
    except ValueError as e:
        raise LoadError(f"{name}: not a profile bench/replay_calibration.py writes: {e}") from None
    except (KeyError, TypeError, ZeroDivisionError, IndexError) as e:
        raise LoadError(f"{name}: not a profile bench/replay_calibration.py writes: {type(e).__name__} {e}") from None


def _cost_model(data: Any, name: str, model: Model | None) -> CostModel:
    linear = data["linear_32b"]
    shape = data["model_32b"]
    kv_bytes = 2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"] * 2  # keys and values, bf16
    totals: dict[int, list[float]] = {}
    for key, seconds in data["decode_attention_32b"].items():
        batch, context = (int(x) for x in key.split("x"))
        totals.setdefault(batch * context, []).append(float(seconds))
    prefill = sorted((int(p), float(s)) for p, s in data["prefill_attention_32b"].items())
    fixed = prefill[0][1]
    fit = [(p * p, s - fixed) for p, s in prefill if p >= FIT_FROM]
    per_square = sum(x * y for x, y in fit) / sum(x * x for x, _ in fit)  # least squares through the origin
    measured = Model(float(linear["parameters"]), kv_bytes)
    machine = data["machine"]
    cost = CostModel(
        linear=_table({int(t): float(s) for t, s in linear["seconds"].items()}),
        decode_attention=_table({total: sorted(s)[len(s) // 2] for total, s in totals.items()}),
        prefill_fixed=fixed,
        prefill_per_square=per_square,
        measured=measured,
        gpu_memory_bytes=int(machine["gpu_memory_bytes"]),
        source=f"{machine['gpu']}, {machine['date']} ({name})",
    )
    return cost if model is None else cost.sized(model)


def _table(points: dict[int, float]) -> Table:
    xs = sorted(points)
    if len(xs) < 2:
        raise ValueError("a table needs two points or more")
    return Table(tuple(float(x) for x in xs), tuple(points[x] for x in xs))
