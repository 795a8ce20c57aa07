"""``python -m adapter`` as deployed (TLS, delegated authentication against the fake API server) as a child process,
for tests and benchmarks that look at the process itself: its log, its resident memory, its sockets."""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import Cluster, grant_cluster_roles
from harness.processes import free_port, launched

ROOT = Path(__file__).resolve().parents[2]
_WITH_LIMITS = (
    "import sys; from adapter.cli import main; from common.connections import Limits; "
    "sys.exit(main(sys.argv[1:], Limits(**{!r})))"
)


@dataclass(frozen=True)
class AdapterProcess:
    pid: int
    host: str
    port: int
    cert: Path
    log: Path
    process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def context(self) -> ssl.SSLContext:
        """A client's TLS settings that trust the adapter's self-signed certificate."""
        return ssl.create_default_context(cafile=str(self.cert))

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError(f"no VmRSS for {self.pid}")


@asynccontextmanager
async def secure_adapter(
    kube: FakeKubeAPIServer,
    prometheus_url: str,
    workdir: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    cpus: set[int] | None = None,
    limits: Mapping[str, float] | None = None,
    root: Path = ROOT,
    cluster: Cluster | None = None,
) -> AsyncIterator[AdapterProcess]:
    """Start the adapter over HTTPS with authentication on and wait until /readyz answers; SIGTERM it on exit.

    ``limits`` are ``common.connections.Limits`` fields, handed to the command's ``main``; ``root`` is the
    checkout whose adapter runs (a benchmark's "before"); ``cluster``, the CAs it trusts (a new one if not given).
    """
    (cluster or Cluster()).publish(kube)
    grant_cluster_roles(kube)
    kubeconfig = kube.kubeconfig(workdir / "kubeconfig")
    port = free_port()
    certs = workdir / "certs"
    log_path = workdir / "adapter.log"
    log = log_path.open("wb")

    command = [sys.executable, "-m", "adapter"]
    if limits:
        command = [sys.executable, "-c", _WITH_LIMITS.format(dict(limits))]
    proc = await asyncio.create_subprocess_exec(
        *launched(command, cpus),
        f"--prometheus-url={prometheus_url}",
        f"--lister-kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--cert-dir={certs}",
        *args,
        cwd=root,
        env={**os.environ, **(env or {})},
        stderr=log,
    )
    served = AdapterProcess(proc.pid, "127.0.0.1", port, certs / "apiserver.crt", log_path, proc)
    try:
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            if proc.returncode is not None:
                raise AssertionError(f"the adapter exited: {log_path.read_text()}")
            if served.cert.exists():
                try:
                    async with (
                        aiohttp.ClientSession() as s,
                        s.get(f"{served.url}/readyz", ssl=served.context()) as r,
                    ):
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"the adapter did not become ready: {log_path.read_text()[-3000:]}")
            await asyncio.sleep(0.1)
        yield served
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()
