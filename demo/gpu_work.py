"""Real GPUs: a ``gpuscale-load run`` on each GPU the Deployment may use, at the duty the workload sets in a file.

PyTorch takes ~7 s to start, while a pod whose image a node already holds starts in about a second, and the loop
would spend most of its 75 s waiting for workers. So every free GPU's worker starts before the loop, idle (duty 0),
and a replica placed on the GPU gives it work: the duty file changes and the worker follows it at its next period,
without a restart. A worker sees only its own GPU (``CUDA_VISIBLE_DEVICES`` is the GPU's UUID: CUDA's numbering can
differ from NVML's).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from demo.deployment import Gpu
from harness.parent_death import guarded

ROOT = Path(__file__).resolve().parents[1]
LOADGEN = (sys.executable, "-m", "loadgen", "run")
STARTED = "load started at"  # what gpuscale-load writes to stderr once its first kernels have run


class GpuWork:
    def __init__(
        self,
        workdir: Path,
        gpus: Sequence[Gpu],
        seconds: float,
        kind: str = "gemm-bf16",
        program: Sequence[str] = LOADGEN,
    ) -> None:
        """``seconds``: how long a worker runs at most, should the demo itself be killed."""
        self._workdir = workdir
        self._gpus = list(gpus)
        self._seconds = seconds
        self._kind = kind
        self._program = list(program)
        self._processes: dict[Gpu, asyncio.subprocess.Process] = {}

    def _file(self, gpu: Gpu, suffix: str) -> Path:
        return self._workdir / f"load-gpu{gpu.index}.{suffix}"

    def _duty(self, gpu: Gpu, duty: float) -> None:
        new = self._file(gpu, "new")
        new.write_text(f"{duty:.4f}\n")
        os.replace(new, self._file(gpu, "duty"))  # renamed over the old one: never read half-written

    def _ended(self, gpu: Gpu) -> RuntimeError | None:
        process = self._processes[gpu]
        if process.returncode is None:
            return None
        log = self._file(gpu, "log").read_text(errors="replace").strip()[-600:]
        return RuntimeError(f"the load on GPU {gpu.index} ended (exit {process.returncode}): {log}")

    async def start(self, within: float = 180.0) -> None:
        """A worker on every GPU, idle; returns once each has run its first kernels."""
        for gpu in self._gpus:
            self._duty(gpu, 0.0)
            with self._file(gpu, "log").open("wb") as log:
                self._processes[gpu] = await asyncio.create_subprocess_exec(
                    *guarded([*self._program, "--kind", self._kind, "--gpu", "0", "--duty-file",
                              str(self._file(gpu, "duty")), "--seconds", f"{self._seconds:.0f}"]),
                    cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log,
                    env={**os.environ, "CUDA_VISIBLE_DEVICES": gpu.uuid},
                )  # fmt: skip
        deadline = time.monotonic() + within
        for gpu in self._gpus:
            while STARTED not in self._file(gpu, "log").read_text(errors="replace"):
                if (ended := self._ended(gpu)) is not None:
                    raise ended
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the load on GPU {gpu.index} did not start within {within:.0f} s")
                await asyncio.sleep(0.2)

    async def set(self, busy: Mapping[Gpu, float]) -> None:
        for gpu in self._gpus:
            if gpu in self._processes and (ended := self._ended(gpu)) is not None:
                raise ended
            self._duty(gpu, busy.get(gpu, 0.0))

    async def close(self) -> None:
        """Terminate every worker first, then wait: a Ctrl-C while waiting for one leaves none running unasked."""
        processes = list(self._processes.values())
        self._processes.clear()
        for process in processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
        for process in processes:
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
