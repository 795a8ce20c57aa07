"""A copy of one kind of Kubernetes object on this node, kept by LIST then WATCH (``common/list_watch.py``).

The collector keeps two: the pods on its node (``pods/directory.py``) and, with ``--kubernetes-enable-dra``,
the node's DRA ResourceSlices (``pods/resource_slices.py``). Each supplies the list call and what to do with a listing
and an event; this module owns the client, the watch and the failures. Objects are read as plain JSON, not typed models:
only a few fields are needed, and the typed models cost CPU on every event and reject objects they consider
incomplete. The watch too is read as the API server writes it, one JSON event a line, rather than through the client
library's watch helper: a watch whose head does not come within 15 s (a hung server or proxy) is given up and the
objects listed again, instead of the copy going stale unreported until the read timeout. Each LIST or watch that
works keeps the owner's source fresh, each failure starts its clock (``common/freshness.py``: ``/health`` fails past
its bound). The watch runs as a task on the server's event loop; the owners' tables are replaced or updated there
and read from the collection thread (a dict read or a reference swap, safe under the GIL).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from collector.kube import client as kube_client
from common.freshness import Freshness
from common.list_watch import Restart, list_watch
from common.log_limit import LogLimit, left_out

log = logging.getLogger(__name__)

_WATCH_SECONDS = 300
_REQUEST_SECONDS = 15.0  # a LIST answered in full; a watch's head


class WatchError(Exception):
    """The watch failed in a way the API server's answers do not say: no head in time, a malformed event."""


def _expired(error: BaseException) -> bool:
    from kubernetes_asyncio.client.exceptions import ApiException

    return isinstance(error, ApiException) and error.status == 410


Object = dict[str, Any]
# The typed client's list method for this kind (``CoreV1Api(client).list_pod_for_all_namespaces``), given the client.
ListMethod = Callable[..., Awaitable[Any]]


class KubeWatch:
    def __init__(
        self,
        what: str,
        kubeconfig: str | None,
        list_method: Callable[[Any], ListMethod],
        field_selector: str,
        replace: Callable[[list[Object]], None],
        apply: Callable[[str, Object], None],
        consequence: str,
        source: Freshness | None = None,
        request_seconds: float = _REQUEST_SECONDS,
    ) -> None:
        """``replace`` takes a whole listing, ``apply`` one event (ADDED, MODIFIED, DELETED) and its object;
        ``consequence`` completes the warning logged when the API fails ("shared-GPU pods cannot be named");
        ``source`` hears of each LIST and watch that worked and each failure (``/health`` fails past its bound);
        ``request_seconds``: the most a LIST may take, and a watch's head."""
        self.what = what
        self._kubeconfig = kubeconfig
        self._list_method = list_method
        self._selector = field_selector
        self._replace = replace
        self._apply = apply
        self._consequence = consequence
        self.source = source
        self._request_seconds = request_seconds
        self._log_limit = LogLimit(60.0)  # a failing API is retried with back-off: one line a minute says it
        self.synced = False
        self.errors: Counter[str] = Counter()

    async def run(self) -> None:
        """List, then watch, forever (cancel to stop)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        api_client: Any = None

        async def list_once() -> str:
            nonlocal api_client
            if api_client is None:
                api_client = await kube_client.api_client(self._kubeconfig)
            response = await self._list_method(api_client)(
                field_selector=self._selector, _preload_content=False, _request_timeout=self._request_seconds
            )
            body = await response.read()
            if response.status >= 400:  # with _preload_content=False the client hands back errors unraised
                raise ApiException(status=response.status, reason=response.reason)
            listed = json.loads(body)
            items = [item for item in listed.get("items") or [] if isinstance(item, dict)]
            self._replace(items)
            if not self.synced:
                log.info("%s synced: %d object(s) with %s", self.what, len(items), self._selector)
            self.synced = True
            self._succeeded()
            return str(listed["metadata"]["resourceVersion"])

        async def watch_from(version: str) -> AsyncIterator[str]:
            import aiohttp

            # read as the API server writes it, one JSON event a line; the server ends the watch at timeoutSeconds,
            # and a read silent for longer than that means the connection is gone
            limit = aiohttp.ClientTimeout(total=None, sock_connect=self._request_seconds, sock_read=_WATCH_SECONDS + 30)
            try:
                # kube-apiserver sends a watch's head at once: one that does not come is a hung server or proxy,
                # which must not leave the copy stale, unreported, until the read timeout ends it
                async with asyncio.timeout(self._request_seconds):
                    response = await self._list_method(api_client)(
                        field_selector=self._selector, watch=True, resource_version=version,
                        timeout_seconds=_WATCH_SECONDS, allow_watch_bookmarks=True,
                        _preload_content=False, _request_timeout=limit,
                    )  # fmt: skip
            except TimeoutError:
                raise WatchError(f"no answer to the watch within {self._request_seconds:g}s") from None
            try:
                if response.status >= 400:
                    raise ApiException(status=response.status, reason=response.reason)
                async for line in response.content:
                    if line.strip():
                        yield self._event(line)
            finally:
                response.release()

        def restarted(why: Restart, error: BaseException | None) -> None:
            if why == "expired":  # our resourceVersion was compacted away: listed again at once
                self.errors["Expired"] += 1
            elif why == "closed":  # the server ended the watch at its timeout: the API works
                self._succeeded()
            elif isinstance(error, ApiException):
                self._failed(f"HTTP{error.status}", f"{error.status} {error.reason}")
            elif error is not None:  # config, network, TLS, a malformed answer: tried again later, never fatal
                self._failed(type(error).__name__, str(error) or repr(error))

        try:
            await list_watch(list_once, watch_from, _expired, restarted)
        finally:
            if api_client is not None:
                await api_client.close()

    def _event(self, line: bytes) -> str:
        """Apply one watch event; its resourceVersion. An ERROR event raises: 410 as ``ApiException`` (list again)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        event = json.loads(line)
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            raise WatchError("a watch event that is not a JSON object with an object")
        kind = event.get("type")
        if kind == "ERROR":
            raise ApiException(status=obj.get("code") or 0, reason=str(obj.get("reason") or "watch error"))
        if kind != "BOOKMARK":  # a bookmark only moves the version on
            self._apply(str(kind), obj)
        return str((obj.get("metadata") or {}).get("resourceVersion") or "")

    def _succeeded(self) -> None:
        if self.source is not None:
            self.source.succeeded()

    def _failed(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        if self.source is not None:
            self.source.failed(f"Kubernetes API failed ({kind}: {detail})")
        held = self._log_limit.allow(kind)
        if held is not None:
            log.warning(
                "%s: Kubernetes API failed (%s: %s); %s until it answers%s",
                self.what, kind, detail, self._consequence, left_out(held, self._log_limit.interval),
            )  # fmt: skip
