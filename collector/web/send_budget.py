"""The bytes of answers written to clients that have not read them yet, over every connection of the server.

A client that asks for ``/metrics`` and reads nothing leaves the page in the system's send buffer, which Linux grows
to 4 MiB a connection, and which the pod's memory cgroup is charged for: 900 such connections held 900 pages of
393 KB (31 → 349 MiB, over the 256Mi limit). So each connection's send buffer is set to ``send_buffer`` bytes (Linux
doubles it for its bookkeeping), and the rest of an answer waits in the server's write buffer, where it is counted
until the system has taken it (the write buffer drained) or the connection closes. The answers unread hold at most
``limit`` bytes together: one that would pass it cuts the connections whose answers have waited longest until it
fits (one answer alone is always written, whatever its size), as the listener makes room for a new connection by
closing the oldest idle one. A scraper reads its page within milliseconds, so the newcomer is served and those who
read nothing give their room back; an answer the system has not taken within the write timeout has its connection
cut too, as Go's ``WriteTimeout`` does.
"""

from __future__ import annotations

from typing import Protocol

MAX_BYTES_IN_FLIGHT = 32 * 1024 * 1024  # some 80 pages of 400 KB; a scraper reads its page at once
WRITE_TIMEOUT = 30.0  # for the system to take an answer: longer than any Prometheus scrape_timeout of a default job
# a connection's send buffer: 32 KiB in flight sends a 400 KB page in about 13 round trips (13 ms at 1 ms)
SEND_BUFFER = 16 * 1024


class Holder(Protocol):
    def cut(self) -> None:
        """Close the connection at once: its room was given to a newer answer."""


class SendBudget:
    """``held``: bytes written and not yet taken by the system, over every connection; ``peak``: the most ever held;
    ``cut``: connections cut to make room for a newer answer."""

    def __init__(
        self, limit: int = MAX_BYTES_IN_FLIGHT, write_timeout: float = WRITE_TIMEOUT, send_buffer: int = SEND_BUFFER
    ) -> None:
        self.limit = limit
        self.write_timeout = write_timeout
        self.send_buffer = send_buffer
        self.held = 0
        self.peak = 0
        self.cut = 0
        self._holders: dict[Holder, int] = {}  # the bytes each connection holds, the one that has waited longest first

    def take(self, holder: Holder, size: int) -> None:
        """Room for ``size`` bytes of ``holder``'s answer, made by cutting the connections that have waited longest."""
        while self.held + size > self.limit and (oldest := next((h for h in self._holders if h is not holder), None)):
            self.held -= self._holders.pop(oldest)
            self.cut += 1
            oldest.cut()
        self.held += size
        self.peak = max(self.peak, self.held)
        self._holders[holder] = self._holders.get(holder, 0) + size

    def give(self, holder: Holder, size: int | None = None) -> None:
        """``size`` bytes of ``holder``'s back (None: all it holds)."""
        holding = self._holders.pop(holder, 0)
        size = holding if size is None else min(size, holding)
        self.held -= size
        if holding > size:
            self._holders[holder] = holding - size
