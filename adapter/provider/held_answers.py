"""The last good answer to each question, served in Prometheus' place while it fails (``--backend-failure-hold``).

Without a hold every answer is a 503 while Prometheus is down: the HPA keeps the replica count it had, unable to scale
up for a burst or down, and KEDA counts failures towards its ``fallback``. With one, a question whose Prometheus query
fails is answered with the last answer Prometheus gave to that same question, for at most the hold after that answer
was read; then 503 again. The answer is the one read, original sample timestamps included, so a consumer can see
how old it is (the HPA does not reject old timestamps; docs/reliability.md says what it and KEDA do).

Keyed by the question itself, as the provider's answer memo is (``CustomRequest``/``ExternalRequest``: the API
version, namespace, resource, object, metric and both selectors), so a held answer is never handed to another
namespace or selector. Bounded by the weight of what is held, as the memo is: for custom metrics the held values are
mostly the memo's own objects, shared rather than copied.

Which failures are held through: Prometheus unreachable, slower than its timeout, answering an error (5xx, a store of a
Thanos querier that did not answer), an answer of the wrong shape (a proxy's page in its place), no room to read the
answer in time. Never a client's mistake or a refusal that another try would meet again: a bad request, a metric or
object that does not exist (which also drops what was held: the question's latest answer is that it has none), a query
Prometheus refuses (the rule is wrong), an answer over the size limits (the operator has to act).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from cachetools import TTLCache

from adapter.errors import AdapterError, AnswerTooLarge, PrometheusError, QueryError, RequestError
from adapter.self_metrics import AdapterMetrics, HoldState
from common.log_limit import LogLimit, left_out

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
Api = Literal["custom", "external"]
# what may be held at once, by the answers' weight: as much as the answer memo (provider.MEMO_BYTES)
HELD_BYTES = 32 * 1024 * 1024


def held_through(error: AdapterError) -> bool:
    """Whether ``error`` is Prometheus failing now (another try may work), not the question or the rules."""
    return isinstance(error, PrometheusError) and not isinstance(error, (QueryError, AnswerTooLarge))


@dataclass(eq=False)
class Held(Generic[V]):
    """One question's last good answer: when it was read and, while it stands in for Prometheus, since when and why."""

    answer: V
    read_at: float
    weight: int
    held_since: float | None = None
    error: str = ""


class HeldAnswers(Generic[K, V]):
    """One API's held answers: kept after each good answer, handed out while Prometheus fails."""

    def __init__(
        self,
        api: Api,
        hold: float,
        metrics: AdapterMetrics,
        weigh: Callable[[V], int],
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = HELD_BYTES,
    ) -> None:
        """``hold``: seconds an answer may be served after it was read (0: never, nothing is kept)."""
        self.api = api
        self.hold = hold
        self.clock = clock
        self._metrics = metrics
        self._weigh = weigh
        self._max_bytes = max_bytes
        # expiring at read_at + hold: an entry found is one that may still be served
        self._answers: TTLCache[K, Held[V]] = TTLCache(
            max_bytes, max(hold, 1e-9), timer=clock, getsizeof=lambda held: held.weight
        )
        self._holding: dict[K, Held[V]] = {}  # the entries being served in Prometheus' place now
        self._log = LogLimit()  # one line a minute: every question asked during an outage is held alike

    def keep(self, key: K, answer: V) -> None:
        """Prometheus answered ``key``: that answer is the one to hold from now on."""
        if self.hold <= 0:
            return
        self._holding.pop(key, None)
        weight = self._weigh(answer)
        if weight > self._max_bytes:
            self._answers.pop(key, None)
            return
        self._answers[key] = Held(answer, self.clock(), weight)

    def instead_of(self, key: K, error: AdapterError) -> Held[V] | None:
        """The held answer to serve for ``key`` in place of ``error``, or None: the error stands."""
        if isinstance(error, RequestError):
            self._answers.pop(key, None)  # its latest answer is that there is none: never serve an older one
            self._holding.pop(key, None)
            return None
        if self.hold <= 0 or not held_through(error):
            return None
        held = self._answers.get(key)
        if held is None:
            self._holding.pop(key, None)
            return None
        if held.held_since is None:
            held.held_since = self.clock()
        held.error = str(error)
        self._holding[key] = held
        if len(self._holding) > 2 * len(self._answers) + 16:
            self._prune()
        self._metrics.held_served.labels(self.api).inc()
        left = self._log.allow("held")
        if left is not None:
            log.warning(
                "%s metrics: Prometheus fails, answering with the last good answers (at most %gs old, "
                "--backend-failure-hold): %s%s", self.api, self.hold, error, left_out(left, self._log.interval)
            )  # fmt: skip
        return held

    def age(self, held: Held[V]) -> float:
        return self.clock() - held.read_at

    def state(self) -> HoldState:
        """How many answers stand in for Prometheus now, the oldest's age, and the last error that made one."""
        self._prune()
        now = self.clock()
        oldest = min((held.read_at for held in self._holding.values()), default=None)
        latest = max(self._holding.values(), key=lambda held: held.held_since or 0.0, default=None)
        return HoldState(
            self.api,
            self.hold,
            len(self._holding),
            0.0 if oldest is None else now - oldest,
            latest.error if latest else "",
        )

    def _prune(self) -> None:
        """Forget what no longer stands in: answered again since, past its hold, or pushed out by newer answers."""
        self._holding = {k: h for k, h in self._holding.items() if self._answers.get(k) is h}
