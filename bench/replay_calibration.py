"""What an engine step costs on this GPU, measured, for the replay's cost model (``gpuscale-load replay``).

Four tables, each the median of ``--repeats`` timed runs after a warm-up, on one CUDA GPU:

1. ``serve``: the step of ``gpuscale-load serve``'s engine (loadgen/serving/gpu_steps.py: a bf16 GEMM chain, hidden
   8192, 64 products) for 1 to 8192 tokens, timed as the engine times it (the step returns after synchronizing).
2. ``linear_32b``: the linear layers of a 32B-parameter transformer (Qwen2.5-32B's shapes: hidden 5120, 64 layers,
   40 query and 8 key-value heads of 128, MLP 27648; 31.3 G parameters in the layers) for 1 to 8192 tokens: per layer
   the QKV, output, gate-up and down products in bf16. Four layers' weights are allocated and used in turn, each
   matrix larger than the L2 cache, so every product reads its weights from memory as a real model's do.
3. ``decode_attention_32b``: attention of one decode step over the KV cache (PyTorch's scaled_dot_product_attention,
   grouped-query, bf16) for a batch of B requests each with C tokens of context, all 64 layers.
4. ``prefill_attention_32b``: causal attention over a prompt of P tokens, all 64 layers.

It also prints the device's memory bandwidth (a device-to-device copy, bytes read and written) and what the serve
step's table implies: the weights' bandwidth (its bytes over its 1-token step) and the tensor rate (its FLOPs over
its 8192-token step), and the 32B linear step those two predict next to the one measured, so the scaling by bytes
and FLOPs that ``replay`` uses for models of other sizes is checked on this GPU.

    PYTHONPATH=. python -m bench.replay_calibration [--repeats 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from loadgen.serving.gpu_steps import DISTINCT_WEIGHTS, GemmSteps
from loadgen.serving.settings import HIDDEN, LAYERS

TOKENS = (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
# Qwen2.5-32B (config.json): the model llm-d timed its cold start with is of this size and shape
MODEL_32B = {"hidden": 5120, "layers": 64, "heads": 40, "kv_heads": 8, "head_dim": 128, "mlp": 27648}
BATCHES = (1, 4, 16, 32, 64)
CONTEXTS = (256, 1024, 2048, 4096)
PROMPTS = (128, 256, 512, 1024, 2048, 4096, 8192)
BF16 = 2


def median_seconds(torch: Any, run: Callable[[], None], repeats: int) -> float:
    run()  # kernels chosen and caches warm before the first timed run
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class Linear32b:
    """The products of the 32B model's 64 layers for ``tokens`` tokens, four layers' weights used in turn."""

    def __init__(self, torch: Any, device: Any, max_tokens: int) -> None:
        m = MODEL_32B
        h, qkv, mlp = m["hidden"], (m["heads"] + 2 * m["kv_heads"]) * m["head_dim"], m["mlp"]
        self.params = m["layers"] * (h * qkv + m["heads"] * m["head_dim"] * h + h * 2 * mlp + mlp * h)
        scale = h**-0.5

        def weight(rows: int, cols: int) -> Any:
            return torch.randn(rows, cols, device=device, dtype=torch.bfloat16) * scale

        self._layers = [
            (weight(h, qkv), weight(h, h), weight(h, 2 * mlp), weight(mlp, h)) for _ in range(DISTINCT_WEIGHTS)
        ]
        self._x = torch.randn(max_tokens, h, device=device, dtype=torch.bfloat16)
        self._y = torch.empty(max_tokens, h, device=device, dtype=torch.bfloat16)
        self._qkv = torch.empty(max_tokens, qkv, device=device, dtype=torch.bfloat16)
        self._up = torch.empty(max_tokens, 2 * mlp, device=device, dtype=torch.bfloat16)
        self._torch = torch
        self._mlp = mlp
        self._count = m["layers"]

    def free(self) -> None:
        self._layers.clear()

    def run(self, tokens: int) -> None:
        torch, x, y = self._torch, self._x[:tokens], self._y[:tokens]
        for layer in range(self._count):
            w_qkv, w_o, w_up, w_down = self._layers[layer % len(self._layers)]
            torch.matmul(x, w_qkv, out=self._qkv[:tokens])
            torch.matmul(x, w_o, out=y)  # the attention's output projection, on a tensor of the same shape
            torch.matmul(y, w_up, out=self._up[:tokens])
            torch.matmul(self._up[:tokens, : self._mlp], w_down, out=x)


def decode_attention(torch: Any, device: Any, batch: int, context: int) -> Callable[[], None]:
    m = MODEL_32B
    f = torch.nn.functional.scaled_dot_product_attention
    q = torch.randn(batch, m["heads"], 1, m["head_dim"], device=device, dtype=torch.bfloat16)
    kv = [
        (
            torch.randn(batch, m["kv_heads"], context, m["head_dim"], device=device, dtype=torch.bfloat16),
            torch.randn(batch, m["kv_heads"], context, m["head_dim"], device=device, dtype=torch.bfloat16),
        )
        for _ in range(DISTINCT_WEIGHTS)
    ]

    def run() -> None:
        for layer in range(m["layers"]):
            k, v = kv[layer % len(kv)]
            f(q, k, v, enable_gqa=True)

    return run


def prefill_attention(torch: Any, device: Any, prompt: int) -> Callable[[], None]:
    m = MODEL_32B
    f = torch.nn.functional.scaled_dot_product_attention
    q = torch.randn(1, m["heads"], prompt, m["head_dim"], device=device, dtype=torch.bfloat16)
    k = torch.randn(1, m["kv_heads"], prompt, m["head_dim"], device=device, dtype=torch.bfloat16)
    v = torch.randn(1, m["kv_heads"], prompt, m["head_dim"], device=device, dtype=torch.bfloat16)

    def run() -> None:
        for _ in range(m["layers"]):
            f(q, k, v, is_causal=True, enable_gqa=True)

    return run


def copy_bandwidth(torch: Any, device: Any, repeats: int) -> float:
    """Bytes per second a device-to-device copy of 2 GiB moves, read and written counted."""
    a = torch.empty(2**30, device=device, dtype=torch.bfloat16)
    b = torch.empty_like(a)
    seconds = median_seconds(torch, lambda: b.copy_(a), repeats)
    return float(2 * a.numel() * BF16 / seconds)


def step_table(torch: Any, run: Callable[[int], None], repeats: int) -> dict[int, float]:
    return {t: median_seconds(torch, lambda t=t: run(t), repeats) for t in TOKENS}  # type: ignore[misc]


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="write the tables here, as replay's cost model reads them")
    parser.add_argument("--gpu", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    device = torch.device(f"cuda:{args.gpu}")
    torch.cuda.set_device(device)
    props = torch.cuda.get_device_properties(device)
    import pynvml

    pynvml.nvmlInit()
    driver = pynvml.nvmlSystemGetDriverVersion()
    machine = {
        "gpu": props.name,
        "gpu_memory_bytes": props.total_memory,
        "multiprocessors": props.multi_processor_count,
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    print(" ".join(f"{k}={v}" for k, v in machine.items()), flush=True)
    out: dict[str, Any] = {"machine": machine, "model_32b": MODEL_32B}
    report = []

    bandwidth = copy_bandwidth(torch, device, args.repeats)
    out["copy_bytes_per_second"] = bandwidth
    print(f"device-to-device copy: {bandwidth / 1e12:.2f} TB/s", flush=True)

    out["serve"] = {
        "hidden": HIDDEN,
        "layers": LAYERS,
        "seconds": step_table(torch, GemmSteps(HIDDEN, LAYERS, max(TOKENS), args.gpu).run, args.repeats),
    }
    torch.cuda.empty_cache()
    print("serve step measured", flush=True)
    linear = Linear32b(torch, device, max(TOKENS))
    out["linear_32b"] = {"parameters": linear.params, "seconds": step_table(torch, linear.run, args.repeats)}
    linear.free()
    torch.cuda.empty_cache()
    print("32B linear layers measured", flush=True)

    decode: dict[str, float] = {}
    for b in BATCHES:
        for c in CONTEXTS:
            decode[f"{b}x{c}"] = median_seconds(torch, decode_attention(torch, device, b, c), args.repeats)
            torch.cuda.empty_cache()
    out["decode_attention_32b"] = decode
    out["prefill_attention_32b"] = {
        p: median_seconds(torch, prefill_attention(torch, device, p), args.repeats) for p in PROMPTS
    }
    print("attention measured", flush=True)

    # what the serve step says of this GPU, and what that predicts for the 32B layers
    serve_s = out["serve"]["seconds"]
    weight_bytes = LAYERS * HIDDEN * HIDDEN * BF16
    weights_bw = weight_bytes / serve_s[1]
    flops_rate = 2 * LAYERS * HIDDEN * HIDDEN * max(TOKENS) / serve_s[max(TOKENS)]
    out["serve_weights_bytes_per_second"] = weights_bw
    out["serve_flops_per_second"] = flops_rate
    p32 = out["linear_32b"]["parameters"]
    rows: list[tuple[object, ...]] = []
    for t in TOKENS:
        predicted = max(p32 * BF16 / weights_bw, 2 * p32 * t / flops_rate)
        measured = out["linear_32b"]["seconds"][t]
        rows.append((t, f"{serve_s[t] * 1e3:.2f}", f"{measured * 1e3:.2f}", f"{predicted * 1e3:.2f}",
                     f"{predicted / measured:.2f}"))  # fmt: skip
    report.append(
        table(
            "Linear layers: one step of t tokens (ms)",
            ("tokens", "serve step (8192 x 64 chain)", "32B layers, measured", "32B from serve's rates", "ratio"),
            rows,
        )
    )
    report.append(
        f"serve's rates: weights read at {weights_bw / 1e12:.2f} TB/s (1 token), products at "
        f"{flops_rate / 1e12:.0f} TFLOP/s ({max(TOKENS)} tokens); copy {bandwidth / 1e12:.2f} TB/s\n"
    )
    kv_bytes = 2 * MODEL_32B["layers"] * MODEL_32B["kv_heads"] * MODEL_32B["head_dim"] * BF16
    rows = []
    for key, seconds in decode.items():
        b, c = (int(x) for x in key.split("x"))
        rows.append((b, c, f"{seconds * 1e3:.2f}", f"{b * c * kv_bytes / seconds / 1e12:.2f}"))
    report.append(table("Decode attention, all 64 layers (ms)", ("batch", "context", "ms", "KV read TB/s"), rows))
    rows = [(p, f"{s * 1e3:.2f}") for p, s in out["prefill_attention_32b"].items()]
    report.append(table("Prefill attention, causal, all 64 layers (ms)", ("prompt", "ms"), rows))
    print("\n".join(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
