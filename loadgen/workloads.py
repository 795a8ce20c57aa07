"""The kinds of GPU load, each a step that keeps one unit of the GPU busy for a few milliseconds.

PyTorch is imported lazily: it is an optional extra (``pip install gpuscale[load]``) that GPU machines carry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import LoadError


@dataclass(frozen=True)
class Kind:
    name: str
    description: str
    bytes_needed: Callable[[int], int]  # size → device memory the kind allocates
    build: Callable[[Any, Any, int], Callable[[], None]]  # (torch, device, size) → one step


def _gemm(dtype_name: str) -> Callable[[Any, Any, int], Callable[[], None]]:
    def build(torch: Any, device: Any, n: int) -> Callable[[], None]:
        dtype = getattr(torch, dtype_name)
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        c = torch.empty(n, n, device=device, dtype=dtype)
        return lambda: torch.matmul(a, b, out=c)

    return build


def _fma_kernel(torch: Any, device: Any, n: int, dtype_name: str) -> Callable[[], None]:
    """Chains of dependent multiply-adds on CUDA cores: compute-bound, no tensor cores, no memory traffic to speak of.

    Elementwise PyTorch ops are memory-bound (on an H200 they kept the fp32 pipe 2 % busy), so this is a Triton
    kernel, which PyTorch's CUDA builds carry.
    """
    try:
        import triton

        from .kernels import fma_loop
    except ImportError as e:
        raise LoadError(f"the {dtype_name} kind needs Triton, which CUDA builds of PyTorch include") from e

    count = 132 * 2048 * 8
    x = torch.rand(count, device=device, dtype=getattr(torch, dtype_name))
    grid = (triton.cdiv(count, 1024),)
    return lambda: fma_loop[grid](x, count, iters=2048, block=1024)


def _fp32(torch: Any, device: Any, n: int) -> Callable[[], None]:
    return _fma_kernel(torch, device, n, "float32")


def _fp64(torch: Any, device: Any, n: int) -> Callable[[], None]:
    return _fma_kernel(torch, device, n, "float64")


def _memory(torch: Any, device: Any, n: int) -> Callable[[], None]:
    src = torch.empty(n * n * 4, device=device, dtype=torch.uint8)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


KINDS: dict[str, Kind] = {
    k.name: k
    for k in [
        Kind("gemm-bf16", "bf16 matrix products on tensor cores", lambda n: 3 * n * n * 2, _gemm("bfloat16")),
        Kind("gemm-fp16", "fp16 matrix products on tensor cores", lambda n: 3 * n * n * 2, _gemm("float16")),
        Kind("fp32", "fp32 multiply-adds on CUDA cores", lambda n: 132 * 2048 * 8 * 4, _fp32),
        Kind("fp64", "fp64 multiply-adds on CUDA cores", lambda n: 132 * 2048 * 8 * 8, _fp64),
        Kind("memory", "device-to-device copies (memory bandwidth)", lambda n: 2 * n * n * 4, _memory),
    ]
}


def cuda_device(gpu: int) -> tuple[Any, Any]:
    """Import PyTorch and open CUDA device ``gpu``; LoadError saying what is missing when it cannot."""
    try:
        import torch
    except ImportError as e:
        raise LoadError("PyTorch is not installed: pip install 'gpuscale[load]' on a machine with a GPU") from e
    if not torch.cuda.is_available():
        raise LoadError("no CUDA GPU is visible to PyTorch (check the driver and CUDA_VISIBLE_DEVICES)")
    if gpu >= torch.cuda.device_count():
        raise LoadError(f"GPU {gpu} does not exist; this machine has {torch.cuda.device_count()}")
    return torch, torch.device("cuda", gpu)


def check_memory(torch: Any, device: Any, needed: int, what: str, smaller: str) -> None:
    """LoadError when ``needed`` bytes would take more than 90 % of the device's free memory."""
    free, _total = torch.cuda.mem_get_info(device)
    if needed > free * 0.9:
        raise LoadError(
            f"{what} needs {needed / 2**30:.1f} GiB but GPU {device.index} has {free / 2**30:.1f} GiB free; {smaller}"
        )


def open_device(kind: Kind, size: int, gpu: int) -> tuple[Any, Any]:
    """Import PyTorch and check the GPU can run ``kind`` at ``size`` before any work starts."""
    torch, device = cuda_device(gpu)
    props = torch.cuda.get_device_properties(device)
    if kind.name == "gemm-bf16" and not torch.cuda.is_bf16_supported():
        raise LoadError(f"{props.name} has no bf16 support; use gemm-fp16")
    if kind.name == "fp64" and props.major < 6:
        raise LoadError(f"{props.name} has no usable fp64 units")
    check_memory(torch, device, kind.bytes_needed(size), f"{kind.name} at size {size}", "use a smaller --size")
    return torch, device
