"""A step's work on CUDA: a chain of bf16 matrix products as wide as the tokens the step computes.

Each step multiplies a (tokens x hidden) activation by ``layers`` (hidden x hidden) weight matrices in turn, then
waits for the GPU (``torch.cuda.synchronize``), so that a step lasts as long as its work really takes. That is the
shape of a transformer's linear layers: with few tokens a step reads every weight once and is bound by memory
bandwidth, so it costs about the same for 1 token as for 64 (decoding a batch is nearly free); with many tokens
(prompts) it is bound by the tensor cores and grows with them. On an H200 at ``serve``'s defaults (hidden 8192, 64
products) a step took 2.3 ms for 1 to 128 tokens, 3.7 ms for 256, 6.9 ms for 512 and 109 ms for 8192. There is no
attention, so the cost of reading the KV cache, which grows with the context, is not modelled.

Four weight matrices are used in turn (each far larger than the H200's 50 MB L2 cache, so every layer reads its
weights from memory) instead of one per layer: the traffic of ``layers`` matrices for the memory of four.
PyTorch is imported here, when a GPU step runner is made, and only then.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from ..errors import LoadError
from ..workloads import check_memory, cuda_device

DISTINCT_WEIGHTS = 4


class GemmSteps:
    def __init__(self, hidden: int, layers: int, max_tokens: int, gpu: int = 0) -> None:
        torch, device = cuda_device(gpu)
        if not torch.cuda.is_bf16_supported():
            raise LoadError(f"{torch.cuda.get_device_properties(device).name} has no bf16 support")
        weights = min(layers, DISTINCT_WEIGHTS)
        needed = 2 * (weights * hidden * hidden + 2 * max_tokens * hidden)
        check_memory(torch, device, needed, f"--hidden {hidden} with --max-step-tokens {max_tokens}",
                     "use a smaller --hidden or --max-step-tokens")  # fmt: skip
        self._torch: Any = torch
        self._device: Any = device
        self._layers = layers
        # scaled so that each product keeps its input's spread: values stay in bf16's range through any chain
        scale = 1 / math.sqrt(hidden)
        self._weights = [
            torch.randn(hidden, hidden, device=device, dtype=torch.bfloat16) * scale for _ in range(weights)
        ]
        self._buffers = [torch.randn(max_tokens, hidden, device=device, dtype=torch.bfloat16) for _ in range(2)]
        self.name = torch.cuda.get_device_properties(device).name
        self._thread = threading.get_ident()
        for tokens in (1, max_tokens):  # cuBLAS starts and picks its kernels before the first timed step
            self.run(tokens)

    def run(self, tokens: int) -> None:
        if tokens <= 0:
            return
        if threading.get_ident() != self._thread:
            # the engine steps on a thread of its own, which has no CUDA context until it is given the device's
            self._torch.cuda.set_device(self._device)
            self._thread = threading.get_ident()
        x, y = (b[:tokens] for b in self._buffers)
        for layer in range(self._layers):
            self._torch.matmul(x, self._weights[layer % len(self._weights)], out=y)
            x, y = y, x
        self._torch.cuda.synchronize(self._device)
