"""Triton kernels for the fp32 and fp64 loads. Imported only when such a load runs (Triton ships with CUDA PyTorch).

Triton reads parameter annotations as compile-time hints, so these functions carry none but ``tl.constexpr``.
"""

import triton
import triton.language as tl


@triton.jit
def fma_loop(x_ptr, count, iters: tl.constexpr, block: tl.constexpr):
    offs = tl.program_id(0) * block + tl.arange(0, block)
    mask = offs < count
    a = tl.load(x_ptr + offs, mask=mask)
    b = a + 1.0
    c = a + 2.0
    d = a + 3.0
    # Four independent chains of dependent multiply-adds, so each warp has work while one chain waits.
    for _ in range(iters):
        a = a * 0.9999 + 0.0001
        b = b * 0.9999 + 0.0001
        c = c * 0.9999 + 0.0001
        d = d * 0.9999 + 0.0001
    tl.store(x_ptr + offs, a + b + c + d, mask=mask)
