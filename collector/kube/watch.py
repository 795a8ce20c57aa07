"""A copy of one kind of Kubernetes object on this node, kept by LIST then WATCH (``common/list_watch.py``).

The collector keeps two: the pods on its node (``pods/directory.py``) and, with ``--kubernetes-enable-dra``,
the node's DRA ResourceSlices (``pods/resource_slices.py``). Each supplies the list call and what to do with a listing
and an event; this module owns the client, the watch and the failures. Objects are read as plain JSON, not typed models:
only a few fields are needed, and the typed models cost CPU on every event and reject objects they consider
incomplete. The watch runs as a task on the server's event loop; the owners' tables are replaced or updated there
and read from the collection thread (a dict read or a reference swap, safe under the GIL).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from collector.kube import client as kube_client
from common.list_watch import Restart, list_watch
from common.log_limit import LogLimit, left_out

log = logging.getLogger(__name__)

_WATCH_SECONDS = 300

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
    ) -> None:
        """``replace`` takes a whole listing, ``apply`` one event (ADDED, MODIFIED, DELETED) and its object;
        ``consequence`` completes the warning logged when the API fails ("shared-GPU pods cannot be named")."""
        self.what = what
        self._kubeconfig = kubeconfig
        self._list_method = list_method
        self._selector = field_selector
        self._replace = replace
        self._apply = apply
        self._consequence = consequence
        self._log_limit = LogLimit(60.0)  # a failing API is retried with back-off: one line a minute says it
        self.synced = False
        self.errors: Counter[str] = Counter()

    async def run(self) -> None:
        """List, then watch, forever (cancel to stop)."""
        from kubernetes_asyncio import watch
        from kubernetes_asyncio.client.exceptions import ApiException

        api_client: Any = None

        async def list_once() -> str:
            nonlocal api_client
            if api_client is None:
                api_client = await kube_client.api_client(self._kubeconfig)
            response = await self._list_method(api_client)(field_selector=self._selector, _preload_content=False)
            body = await response.read()
            if response.status >= 400:  # with _preload_content=False the client hands back errors unraised
                raise ApiException(status=response.status, reason=response.reason)
            listed = json.loads(body)
            items = [item for item in listed.get("items") or [] if isinstance(item, dict)]
            self._replace(items)
            if not self.synced:
                log.info("%s synced: %d object(s) with %s", self.what, len(items), self._selector)
            self.synced = True
            return str(listed["metadata"]["resourceVersion"])

        async def watch_from(version: str) -> AsyncIterator[str]:
            async with watch.Watch(return_type="object") as w:
                stream = w.stream(
                    self._list_method(api_client),
                    field_selector=self._selector,
                    resource_version=version,
                    timeout_seconds=_WATCH_SECONDS,
                )
                async for event in stream:
                    obj = event["raw_object"]
                    self._apply(event["type"], obj)
                    yield str((obj.get("metadata") or {}).get("resourceVersion") or "")

        def restarted(why: Restart, error: BaseException | None) -> None:
            if why == "expired":  # our resourceVersion was compacted away: listed again at once
                self.errors["Expired"] += 1
            elif isinstance(error, ApiException):
                self._failed(f"HTTP{error.status}", f"{error.status} {error.reason}")
            elif error is not None:  # config, network, TLS, a malformed answer: tried again later, never fatal
                self._failed(type(error).__name__, str(error) or repr(error))

        try:
            await list_watch(
                list_once, watch_from, lambda e: isinstance(e, ApiException) and e.status == 410, restarted
            )
        finally:
            if api_client is not None:
                await api_client.close()

    def _failed(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        held = self._log_limit.allow(kind)
        if held is not None:
            log.warning(
                "%s: Kubernetes API failed (%s: %s); %s until it answers%s",
                self.what, kind, detail, self._consequence, left_out(held, self._log_limit.interval),
            )  # fmt: skip
