"""What a Prometheus-compatible server says beside its data, made visible: counted by backend, endpoint and kind,
and logged once a minute per distinct remark and endpoint.

Prometheus's API may add ``warnings`` and (newer releases) ``infos`` to a successful answer. Thanos's querier warns
when a store did not answer and ``partial_response`` let it answer without that store's data; Prometheus 2.49+
warns when ``limit`` cut a list. A store that cuts a list silently (VictoriaMetrics) is caught by the listing's
length instead (``cut``). Queries keep their remarks in their result too, for explain.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable

from adapter.self_metrics import AdapterMetrics
from common.log_limit import LogLimit, left_out

log = logging.getLogger(__name__)

LOG_EVERY = 60.0
SHOWN_CHARS = 200  # of the query or selector a remark is about: a 1,500-pod regex is 25 KB
TRUNCATED = "results truncated due to limit"  # Prometheus's warning when limit cut a list
# Thanos's warnings name the time range asked (MinTime: 1733221200000): the same store failing is one kind of remark
_MILLIS = re.compile(r"\d{10,}")


def _shown(about: str) -> str:
    return about if len(about) <= SHOWN_CHARS else about[:SHOWN_CHARS] + "..."


class Remarks:
    """One backend's remarks; ``who`` names it in the log as errors name it."""

    def __init__(
        self, backend: str, who: str, metrics: AdapterMetrics, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.backend = backend
        self.who = who
        self.metrics = metrics
        self._limit = LogLimit(LOG_EVERY, clock)

    def note(self, endpoint: str, path: str, about: str, warnings: Iterable[str], infos: Iterable[str]) -> None:
        """Count each remark; log it unless the same one was logged in the last minute."""
        for kind, texts, level in (("warning", warnings, logging.WARNING), ("info", infos, logging.INFO)):
            for text in texts:
                self.metrics.prometheus_warnings.labels(self.backend, endpoint, kind).inc()
                held = self._limit.allow(f"{kind}\0{endpoint}\0{_MILLIS.sub('#', text)}")
                if held is not None:
                    said = "warned, so the answer may be incomplete" if kind == "warning" else "noted"
                    log.log(level, "%s %s for %s %s: %s%s", self.who, path, _shown(about), said, text,
                            left_out(held, LOG_EVERY))  # fmt: skip

    def cut(self, endpoint: str, path: str, about: str, limit: int) -> None:
        """A listing that reached ``limit`` entries: the store may have left some out."""
        self.metrics.prometheus_warnings.labels(self.backend, endpoint, "truncated").inc()
        held = self._limit.allow(f"cut\0{about}")
        if held is not None:
            log.warning(
                "%s %s for %s stopped at %d series (--prometheus-series-limit): label sets only series beyond them "
                "carry are not discovered%s",
                self.who,
                path,
                _shown(about),
                limit,
                left_out(held, LOG_EVERY),
            )
