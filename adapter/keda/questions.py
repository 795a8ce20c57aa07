"""The questions StreamIsActive streams ask, each asked of the provider once an interval however many streams ask
it: a thousand streams of one question make one query an interval, not a thousand.

A question is what a trigger's value depends on: the namespace, the metric, its type and the label selector; not the
activation value, which each stream compares on its own. The first stream to ask starts a task that asks every
interval and keeps the latest outcome; a stream that joins reads that outcome at once (it is at most an interval
old, as the next one of every other stream would be) and then each new one; the last stream to leave stops the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from decimal import Decimal
from typing import TypeAlias

from adapter.errors import AdapterError
from adapter.keda.metadata import MetricType, ScalerQuery
from adapter.keda.values import value
from adapter.provider.provider import Provider
from adapter.query.selectors import Selector

log = logging.getLogger(__name__)

Key: TypeAlias = tuple[str, str, MetricType, Selector]
# a value, or why there is none: an AdapterError (Prometheus down, no series) or a bug
Outcome: TypeAlias = Decimal | Exception


class Question:
    """One question, asked every ``interval`` while a stream asks it; its outcomes numbered from 1."""

    def __init__(self, provider: Provider, namespace: str, query: ScalerQuery, interval: float) -> None:
        self.what = f"{namespace}/{query.metric}"
        self.outcome: Outcome | None = None
        self.count = 0
        self.streams = 0
        self.closed = False
        self._news = asyncio.Event()
        self._task = asyncio.ensure_future(self._ask(provider, namespace, query, interval))

    async def _ask(self, provider: Provider, namespace: str, query: ScalerQuery, interval: float) -> None:
        answered = failing = False
        while True:
            try:
                outcome: Outcome = await value(provider, namespace, query)
            except AdapterError as e:
                outcome = e
                # said when it begins and when it ends, not every interval: the polled calls say it each time
                if answered and not failing:
                    log.warning("StreamIsActive %s: %s; its streams wait for values", self.what, e)
                    failing = True
            except Exception as e:  # a bug: each stream ends with INTERNAL, logged there
                outcome = e
            else:
                if failing:
                    log.info("StreamIsActive %s: values are back", self.what)
                answered, failing = True, False
            self.outcome, self.count = outcome, self.count + 1
            self._news.set()  # wakes every stream waiting; the next outcome has an event of its own
            self._news = asyncio.Event()
            await asyncio.sleep(interval)

    async def after(self, seen: int) -> tuple[Outcome, int] | None:
        """The latest outcome and its number once it is past ``seen``; None once the question is closed."""
        while not self.closed:
            if self.count > seen and self.outcome is not None:
                return self.outcome, self.count
            await self._news.wait()
        return None

    def close(self) -> None:
        """Stop asking (a value being asked is cancelled) and wake every stream, which then ends."""
        self.closed = True
        self._task.cancel()
        self._news.set()


class Questions:
    """The questions being asked, by what their values depend on."""

    def __init__(self, provider: Provider, interval: float) -> None:
        self.provider = provider
        self.interval = interval
        self.closed = False
        self._asked: dict[Key, Question] = {}

    def __len__(self) -> int:
        return len(self._asked)

    @contextlib.contextmanager
    def asking(self, namespace: str, query: ScalerQuery) -> Iterator[Question]:
        """The question ``query`` asks in ``namespace``, for as long as a stream asks it."""
        key = (namespace, query.metric, query.metric_type, query.label_selector)
        question = self._asked.get(key)
        if question is None:
            question = self._asked[key] = Question(self.provider, namespace, query, self.interval)
            if self.closed:
                question.close()
        question.streams += 1
        try:
            yield question
        finally:
            question.streams -= 1
            if question.streams == 0:
                question.close()
                del self._asked[key]

    def close(self) -> None:
        """Close every question, now and from now on: their streams end."""
        self.closed = True
        for question in self._asked.values():
            question.close()
