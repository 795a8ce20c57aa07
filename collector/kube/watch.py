"""A copy of one kind of Kubernetes object on this node, kept by LIST then WATCH (``common/list_watch.py``).

The collector keeps two: the pods on its node (``pods/directory.py``) and, with ``--kubernetes-enable-dra``,
the node's DRA ResourceSlices (``pods/resource_slices.py``). Each supplies the resource's path (or several, one per
API version, newest first: a LIST answered 404 moves on to the next), a field selector, and what to do with a listing
and an event; this module owns the client (``kube/client.py``), the watch and the failures. Objects are read as plain
JSON: only a few fields are needed. The pod directory asks for metadata only: a pod's spec and status are most of its
bytes, which would be read, parsed and dropped at every LIST. The watch is read as the API server writes it, one JSON
event a line, asking for bookmarks (they only move the version on); an ERROR event is the API server's Status (410
Gone: list again). A watch whose head does not come within 15 s (a hung server or proxy) is given up and the objects
listed again, instead of the copy going stale unreported until the read timeout. Each LIST or watch that works keeps
the owner's source fresh, each failure starts its clock (``common/freshness.py``: ``/health`` fails past its bound)
and is logged once a minute per kind, 401, 403 and 404 with what they mean. The watch runs as a task on the server's
event loop; the owners' tables are replaced or updated there and read from the collection thread (a dict read or a
reference swap, safe under the GIL).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from collector.errors import KubeApiError
from collector.kube.client import JSON, KubeClient
from collector.kube.config import KubeAccess
from common.freshness import Freshness
from common.list_watch import Restart, list_watch
from common.log_limit import LogLimit, left_out

log = logging.getLogger(__name__)

_WATCH_SECONDS = 300
_REQUEST_SECONDS = 15.0  # a LIST answered in full; a watch's head
# Metadata only, as client-go's metadata informers ask for it: a server that cannot answer so (an aggregated API)
# falls back to whole objects, which are read the same way.
LIST_METADATA = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
WATCH_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"


class WatchError(Exception):
    """The watch failed in a way the API server's answers do not say: no head in time, a malformed event."""


def _expired(error: BaseException) -> bool:
    return isinstance(error, KubeApiError) and error.status == 410


Object = dict[str, Any]


class KubeWatch:
    def __init__(
        self,
        what: str,
        access: KubeAccess,
        paths: Sequence[str],
        field_selector: str,
        replace: Callable[[list[Object]], None],
        apply: Callable[[str, Object], None],
        consequence: str,
        source: Freshness | None = None,
        request_seconds: float = _REQUEST_SECONDS,
        metadata_only: bool = False,
    ) -> None:
        """``paths``: the resource's list path at each API version to try, newest first (``/api/v1/pods``);
        ``replace`` takes a whole listing, ``apply`` one event (ADDED, MODIFIED, DELETED) and its object;
        ``consequence`` completes the warning logged when the API fails ("shared-GPU pods cannot be named");
        ``source`` hears of each LIST and watch that worked and each failure (``/health`` fails past its bound);
        ``request_seconds``: the most a LIST may take, and a watch's head; ``metadata_only``: objects without their
        spec and status (``PartialObjectMetadata``), when the owner needs names, UIDs and labels only."""
        self.what = what
        self._access = access
        self._paths = tuple(paths)
        self._path = 0  # the version in use: the first the API server served
        self._selector = field_selector
        self._replace = replace
        self._apply = apply
        self._consequence = consequence
        self.source = source
        self._request_seconds = request_seconds
        self._accept = (LIST_METADATA, WATCH_METADATA) if metadata_only else (JSON, JSON)
        self._log_limit = LogLimit(60.0)  # a failing API is retried with back-off: one line a minute says it
        self.synced = False
        self.errors: Counter[str] = Counter()

    @property
    def path(self) -> str:
        return self._paths[self._path]

    async def run(self) -> None:
        """List, then watch, forever (cancel to stop)."""
        client: KubeClient | None = None

        async def list_once() -> str:
            nonlocal client
            if client is None:
                client = KubeClient(self._access.config())
            try:
                body = await client.get(
                    self.path, {"fieldSelector": self._selector}, self._request_seconds, self._accept[0]
                )
            except KubeApiError as e:
                if e.status == 404 and self._path + 1 < len(self._paths):
                    self._path += 1  # not served here: the next LIST (after the loop's back-off) asks an older one
                    log.info("%s: %s is not served, trying %s", self.what, self._paths[self._path - 1], self.path)
                raise
            listed = json.loads(body)
            if not isinstance(listed, dict) or not isinstance(listed.get("metadata"), dict):
                raise WatchError("a LIST answer that is not a JSON list object")
            items = [item for item in listed.get("items") or [] if isinstance(item, dict)]
            self._replace(items)
            if not self.synced:
                log.info("%s synced: %d object(s) with %s", self.what, len(items), self._selector)
            self.synced = True
            self._succeeded()
            return str(listed["metadata"].get("resourceVersion") or "")

        async def watch_from(version: str) -> AsyncIterator[str]:
            assert client is not None  # list_once made it
            params = {
                "fieldSelector": self._selector, "watch": "1", "allowWatchBookmarks": "true",
                "resourceVersion": version, "timeoutSeconds": str(_WATCH_SECONDS),
            }  # fmt: skip
            try:
                # kube-apiserver sends a watch's head at once: one that does not come is a hung server or proxy,
                # which must not leave the copy stale, unreported, until the read timeout ends it
                async with asyncio.timeout(self._request_seconds):
                    # the server ends the watch at timeoutSeconds; a read silent for longer means the connection
                    # is gone
                    stream = await client.watch(self.path, params, _WATCH_SECONDS + 30, self._accept[1])
            except TimeoutError:
                raise WatchError(f"no answer to the watch within {self._request_seconds:g}s") from None
            async with stream:
                async for line in stream.lines():
                    if line.strip():
                        yield self._event(line)

        def restarted(why: Restart, error: BaseException | None) -> None:
            if why == "expired":  # our resourceVersion was compacted away: listed again at once
                self.errors["Expired"] += 1
            elif why == "closed":  # the server ended the watch at its timeout: the API works
                self._succeeded()
            elif isinstance(error, KubeApiError):
                self._failed(f"HTTP{error.status}", str(error), self._meaning(error.status))
            elif error is not None:  # config, network, TLS, a malformed answer: tried again later, never fatal
                self._failed(type(error).__name__, str(error) or repr(error))

        try:
            await list_watch(list_once, watch_from, _expired, restarted)
        finally:
            if client is not None:
                await client.close()

    def _event(self, line: bytes) -> str:
        """Apply one watch event; its resourceVersion. An ERROR event raises the API server's Status as
        ``KubeApiError`` (410: list again)."""
        try:
            event = json.loads(line)
        except ValueError:
            raise WatchError("a watch line that is not JSON") from None
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            raise WatchError("a watch event that is not a JSON object with an object")
        kind = event.get("type")
        if kind == "ERROR":
            code = obj.get("code")
            reason = str(obj.get("reason") or "watch error")
            raise KubeApiError(code if isinstance(code, int) else 0, reason, str(obj.get("message") or ""))
        if kind != "BOOKMARK":  # a bookmark only moves the version on
            self._apply(str(kind), obj)
        return str((obj.get("metadata") or {}).get("resourceVersion") or "")

    def _meaning(self, status: int) -> str:
        """What an error status says to do, for the log line."""
        resource = self.path.rsplit("/", 1)[-1]
        if status == 401:
            return "the API server does not accept the collector's credentials (a token or certificate it rejects)"
        if status == 403:
            return f"the collector's service account needs list and watch on {resource} (its ClusterRole)"
        if status == 404:
            return f"the API server does not serve {self.path}"
        return ""

    def _succeeded(self) -> None:
        if self.source is not None:
            self.source.succeeded()

    def _failed(self, kind: str, detail: str, meaning: str = "") -> None:
        self.errors[kind] += 1
        if self.source is not None:
            self.source.failed(f"Kubernetes API failed ({kind}: {detail})")
        held = self._log_limit.allow(kind)
        if held is not None:
            log.warning(
                "%s: Kubernetes API failed (%s: %s)%s; %s until it answers%s",
                self.what, kind, detail, f": {meaning}" if meaning else "", self._consequence,
                left_out(held, self._log_limit.interval),
            )  # fmt: skip
