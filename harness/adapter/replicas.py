"""Adapter replicas as a Deployment runs them: ``python -m adapter`` processes with the same arguments and the same
serving certificate (a Secret every replica mounts, whose CA is the APIServices' caBundle), against one Prometheus
and one API server, and nothing else in common."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from adapter.security.tls import self_signed
from harness.adapter.process import AdapterProcess, secure_adapter
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import Cluster


@asynccontextmanager
async def replicas(
    kube: FakeKubeAPIServer, prometheus_urls: Sequence[str], workdir: Path, *args: str, cluster: Cluster
) -> AsyncIterator[list[AdapterProcess]]:
    """One adapter per Prometheus URL (the same server, or a proxy in front of it for one replica), each ready
    (``/readyz``) before the next starts, as a rollout brings them up; each is stopped with SIGTERM on exit unless
    it has ended already."""
    cert, key = self_signed(["127.0.0.1"])
    async with AsyncExitStack() as stack:
        started = []
        for index, prometheus_url in enumerate(prometheus_urls):
            home = workdir / f"replica-{index}"
            (home / "certs").mkdir(parents=True)
            (home / "certs" / "apiserver.crt").write_bytes(cert)
            (home / "certs" / "apiserver.key").write_bytes(key)
            adapter = secure_adapter(kube, prometheus_url, home, *args, cluster=cluster)
            started.append(await stack.enter_async_context(adapter))
        yield started
