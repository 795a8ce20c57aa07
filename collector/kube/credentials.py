"""The bearer token of the next request: fixed, from a file read again when it changes, or from an exec plugin.

A token file (the pod's service account, a kubeconfig's ``tokenFile``) is read again whenever its identity changes
(``common/watched_file.py``): the kubelet replaces a projected token before it expires. A file that cannot be read
after it was read once keeps the last token, as client-go does; a 401 makes the next request read it afresh.

An exec plugin (a kubeconfig user's ``exec``: ``aws eks get-token``, ``gke-gcloud-auth-plugin``, ``kubelogin``) is
run as client-go runs it: ``KUBERNETES_EXEC_INFO`` in its environment, no terminal, its ExecCredential on stdout. Its
token is kept until its ``expirationTimestamp`` (or, without one, until the API server answers 401). A plugin that
answers with a client certificate instead is refused with a ``ConfigError``: the collector uses plugin tokens only.
As in client-go, the plugin runs under its own time limit (``EXEC_TIMEOUT``), not the request's: a request that
gives up waiting leaves it running, and the next one waits for the same run instead of starting another.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import time
from collections.abc import Callable
from typing import Any

from collector.errors import ConfigError
from collector.kube.config import ExecPlugin, KubeConfig
from common.watched_file import WatchedFiles

EXEC_TIMEOUT = 60.0  # a cloud plugin may have to fetch a token over the network
_EARLY = 10.0  # seconds before a plugin's token expires that it is asked again: the request must not arrive late


class Credentials:
    def __init__(self, config: KubeConfig, clock: Callable[[], float] = time.time) -> None:
        """``clock``: wall-clock seconds, against which a plugin's expiry time is compared."""
        self._config = config
        self._clock = clock
        self._file = WatchedFiles(config.token_file)
        self._token = "" if config.token_file or config.exec_plugin else (config.token or "")
        self._expires: float | None = None
        self._stale = True
        self._plugin_run: asyncio.Task[tuple[str, float | None]] | None = None

    async def authorization(self) -> str | None:
        """The Authorization header's value, or None when the configuration has no token."""
        if self._config.token_file is not None:
            self._read_file()
        elif self._config.exec_plugin is not None and self._plugin_due():
            self._token, self._expires = await self._plugin(self._config.exec_plugin)
            self._stale = False
        return f"Bearer {self._token}" if self._token else None

    def rejected(self) -> None:
        """The API server answered 401: the next request reads the file, or runs the plugin, again."""
        self._stale = True

    def _read_file(self) -> None:
        path = self._config.token_file
        assert path is not None
        if not (self._file.changed() or self._stale):
            return
        try:
            token = path.read_text().strip()
        except OSError as e:
            if self._token:
                return  # the last token until the file is back
            raise ConfigError(f"{self._config.origin}: token file {path} cannot be read: {e.strerror or e}") from None
        if not token and not self._token:
            raise ConfigError(f"{self._config.origin}: token file {path} is empty")
        self._token = token or self._token
        self._stale = False

    async def _plugin(self, plugin: ExecPlugin) -> tuple[str, float | None]:
        """The plugin's answer: of the run a request gave up waiting for (under way or done), else of a new one."""
        run = self._plugin_run
        if run is None or (run.done() and (run.cancelled() or run.exception() is not None)):
            run = self._plugin_run = asyncio.create_task(run_plugin(plugin, self._config))
            run.add_done_callback(_seen)
        answer = await asyncio.shield(run)  # a request cancelled meanwhile does not cancel the run
        self._plugin_run = None  # taken: the next token due is a new run's
        return answer

    def _plugin_due(self) -> bool:
        return self._stale or (self._expires is not None and self._clock() >= self._expires - _EARLY)


def _seen(run: asyncio.Task[tuple[str, float | None]]) -> None:
    """A run's failure is the next request's to report; asyncio is not to log it as never retrieved meanwhile."""
    if not run.cancelled():
        run.exception()


async def run_plugin(plugin: ExecPlugin, config: KubeConfig) -> tuple[str, float | None]:
    """(token, when it expires in epoch seconds or None); ``ConfigError`` naming the plugin and why not."""
    what = f"{config.origin}: exec plugin {plugin.command}"
    info: dict[str, Any] = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    if plugin.provide_cluster_info:
        info["spec"]["cluster"] = _cluster_info(config)
    env = {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
    try:
        process = await asyncio.create_subprocess_exec(
            plugin.command, *plugin.args, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    except OSError as e:
        raise ConfigError(f"{what} cannot be run: {e.strerror or e}") from None
    try:
        async with asyncio.timeout(EXEC_TIMEOUT):
            out, err = await process.communicate()
    except BaseException as e:  # its time is up, or the collector stops: no plugin is left running
        if process.returncode is None:
            process.kill()
            await process.wait()
        if isinstance(e, TimeoutError):
            raise ConfigError(f"{what} did not answer within {EXEC_TIMEOUT:g}s") from None
        raise
    if process.returncode != 0:
        said = err.decode(errors="replace").strip().splitlines()
        raise ConfigError(f"{what} exited with {process.returncode}" + (f": {said[-1]}" if said else ""))
    return _credential(what, out, plugin.api_version)


def _credential(what: str, out: bytes, api_version: str) -> tuple[str, float | None]:
    try:
        credential = json.loads(out)
    except ValueError:
        credential = None
    if not isinstance(credential, dict) or credential.get("kind") != "ExecCredential":
        raise ConfigError(f"{what} printed no ExecCredential")
    status = credential.get("status")
    if not isinstance(status, dict):
        raise ConfigError(f"{what} printed an ExecCredential without a status")
    if credential.get("apiVersion") != api_version:
        raise ConfigError(f"{what} answered {credential.get('apiVersion')!r}, asked {api_version!r}")
    token = status.get("token")
    if not isinstance(token, str) or not token:
        if status.get("clientCertificateData"):
            raise ConfigError(f"{what} gave a client certificate; the collector uses plugin tokens only")
        raise ConfigError(f"{what} gave no token")
    expiry = status.get("expirationTimestamp")
    if not expiry:
        return token, None
    try:
        when = datetime.datetime.fromisoformat(str(expiry).replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{what}: expirationTimestamp {expiry!r} is not an RFC 3339 time") from None
    return token, when.timestamp()


def _cluster_info(config: KubeConfig) -> dict[str, Any]:
    """The Cluster of ``KUBERNETES_EXEC_INFO`` (provideClusterInfo): where the token is for."""
    cluster: dict[str, Any] = {"server": config.server}
    ca = config.ca_data or (config.ca_file.read_bytes() if config.ca_file else None)
    if ca:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    if config.insecure:
        cluster["insecure-skip-tls-verify"] = True
    if config.tls_server_name:
        cluster["tls-server-name"] = config.tls_server_name
    return cluster
