"""The collector as users start it (``python -m collector ...``), for tests that go through the real command line."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from harness.processes import free_port

ROOT = Path(__file__).resolve().parents[2]


def command(limits: Mapping[str, float] | None = None, service_account: Path | None = None) -> list[str]:
    """The interpreter's arguments that start the collector: ``-m collector``, or its ``main`` handed ``limits``
    (``common.listener.Limits`` fields) and the directory of a pod's service account."""
    if not limits and service_account is None:
        return ["-m", "collector"]
    given = f"Limits(**{dict(limits)!r})" if limits else "None"
    account = f", service_account=Path({str(service_account)!r})" if service_account is not None else ""
    return [
        "-c",
        "import sys; from pathlib import Path; from collector.cli import main; from common.listener import Limits; "
        f"main(sys.argv[1:], {given}{account})",
    ]


@contextmanager
def running_collector(
    *args: str,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    timeout: float = 30,
    collections: int = 2,
    limits: Mapping[str, float] | None = None,
    scheme: str = "http",
    service_account: Path | None = None,
) -> Iterator[str]:
    """Start the collector on a free port and yield its URL once it has published ``collections`` collections.

    Its output goes to ``log`` (read it for what it said) or, when None, to a pipe read only on failure. ``limits``
    are ``common.listener.Limits`` fields, handed to the command's ``main``; ``scheme`` https for a collector
    serving TLS (its certificate is not checked here); ``service_account`` the directory of a pod's service account
    (with ``env`` from ``harness/kube/threaded.py``: the collector reads the API as in a pod)."""
    port = free_port()
    out = log.open("wb") if log is not None else subprocess.PIPE
    proc = subprocess.Popen(
        [sys.executable, *command(limits, service_account), "-a", f"127.0.0.1:{port}", *args],
        cwd=ROOT,
        env={**os.environ, "NODE_NAME": "sim-node", **(env or {})},
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    url = f"{scheme}://127.0.0.1:{port}"
    unchecked = ssl.create_default_context()
    unchecked.check_hostname, unchecked.verify_mode = False, ssl.CERT_NONE
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{url}/metrics", timeout=2, context=unchecked) as resp:
                    if f"gpuscale_collector_collections_total {collections}".encode() in resp.read():
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                said = proc.communicate()[0]
                text = log.read_text() if log is not None else (said or b"").decode()
                raise AssertionError(f"collector did not come up: {text}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
        if log is not None and not isinstance(out, int):
            out.close()


def scrape(url: str, accept: str | None = None) -> tuple[str, str]:
    """The body of ``url``/metrics and its Content-Type."""
    request = urllib.request.Request(f"{url}/metrics", headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=5) as resp:
        return resp.read().decode(), resp.headers["Content-Type"]
