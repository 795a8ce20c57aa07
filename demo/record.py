"""What a run keeps for its picture and page: the syncs of both HPAs, the shared GPU's pods' values, the table, the
decisions and kubectl's answer."""

from __future__ import annotations

from dataclasses import dataclass, field

from demo.hpa_controller import ExternalSync, Sync
from demo.table import ChatTable, Table


@dataclass(frozen=True)
class ChatSample:
    """The chat HPA's sync, with what the run read beside it: the replicas serving and the engines' queues."""

    sync: ExternalSync
    ready: int  # replicas whose engine serves (the others' models are loading)
    waiting: float | None  # inference_requests_waiting in the namespace, from the external metrics API


@dataclass
class Record:
    table: Table
    chat_table: ChatTable = field(default_factory=ChatTable)
    syncs: list[Sync] = field(default_factory=list)
    chat: list[ChatSample] = field(default_factory=list)
    shared: list[dict[str, float]] = field(default_factory=list)  # the shared GPU's pods' values, at each sync
    decisions: list[str] = field(default_factory=list)  # both HPAs', in the order they were made
    kubectl: str = ""  # the command and its answer, as printed ("" until the run has asked)
