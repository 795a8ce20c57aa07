"""The Kubernetes API stand-in on an event loop of its own thread, for code whose own thread blocks: a test waiting on
a collector process, a benchmark driving one.

Objects are changed on the server's loop, where it wakes its watches. With a ``directory`` it serves HTTPS under a CA
of its own, and ``service_account`` writes what the kubelet gives a pod (the token and CA files, and the two
``KUBERNETES_SERVICE_*`` variables), so a collector handed them reads the API as it does in a pod.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from harness.kube.api import TOKEN, FakeKubeAPIServer

T = TypeVar("T")


class ThreadedApiServer:
    def __init__(self, directory: Path | None = None) -> None:
        """``directory``: where its TLS files go (served over HTTPS); None: plain HTTP."""
        self.server = FakeKubeAPIServer()
        self._directory = directory
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.url = ""

    def start(self) -> ThreadedApiServer:
        self._thread.start()
        serving = self._serving() if self._directory is not None else None
        self.url = self.run(self.server.start(*serving) if serving else self.server.start())
        return self

    def _serving(self) -> tuple[tuple[Path, Path], Path]:
        import trustme

        assert self._directory is not None
        self._directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        leaf = ca.issue_cert("127.0.0.1")
        cert, key, ca_file = (self._directory / name for name in ("apiserver.crt", "apiserver.key", "ca.crt"))
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        ca.cert_pem.write_to_path(str(ca_file))
        return (cert, key), ca_file

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def call(self, change: Callable[[FakeKubeAPIServer], T]) -> T:
        """``change(server)`` on the server's loop, which wakes its watches."""

        async def on_the_loop() -> T:
            return change(self.server)

        return self.run(on_the_loop())

    def put(self, resource: str, name: str, **fields: Any) -> None:
        self.call(lambda server: server.put(resource, name, **fields))

    def kubeconfig(self, path: Path) -> Path:
        return self.server.kubeconfig(path)

    def service_account(self, directory: Path) -> dict[str, str]:
        """Write the service account's files into ``directory``; the environment the kubelet sets beside them."""
        assert self.server.ca is not None, "a service account needs HTTPS: start with a directory"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(TOKEN)
        (directory / "ca.crt").write_bytes(self.server.ca.read_bytes())
        (directory / "namespace").write_text("gpuscale")
        port = self.url.rsplit(":", 1)[1]
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}

    def close(self) -> None:
        if self._thread.is_alive():
            self.run(self.server.stop())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> ThreadedApiServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
