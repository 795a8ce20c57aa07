"""The rules in force, reloaded when their file changes; a broken edit is refused and the old rules stay."""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path

from adapter.backends.backend_specs import DEFAULT
from adapter.config.rules import RuleSet, load_rules
from adapter.errors import ConfigError
from adapter.self_metrics import AdapterMetrics
from common.watched_file import WatchedFiles

log = logging.getLogger(__name__)


class RulesFile:
    def __init__(self, path: Path | None, metrics: AdapterMetrics, backends: Collection[str] = (DEFAULT,)) -> None:
        """``backends``: the names rules may give as their ``backend``."""
        self.path = path
        self.metrics = metrics
        self.backends = backends
        self._file = WatchedFiles(path)
        self.rules: RuleSet = self._load()
        self.last_error: str | None = None

    def _load(self) -> RuleSet:
        rules = load_rules(self.path)
        rules.check_backends(self.backends)
        return rules

    def reload_if_changed(self) -> bool:
        """Reload when the file changed since the last look; True when new rules took effect."""
        return self._file.changed() and self.reload()

    def reload(self) -> bool:
        if self.path is None:
            return False
        try:
            rules = self._load()
        except ConfigError as e:
            self.last_error = str(e)
            self.metrics.config_reloads.labels("error").inc()
            self.metrics.config_last_reload_successful.set(0)
            log.error("rules file %s not reloaded, keeping the rules in force: %s", self.path, e)
            return False
        self.last_error = None
        self.metrics.config_last_reload_successful.set(1)
        if rules.digest == self.rules.digest:
            return False
        self.rules = rules
        self.metrics.config_reloads.labels("success").inc()
        log.info(
            "rules file %s reloaded: %d rules, %d external rules",
            self.path,
            len(rules.rules),
            len(rules.external_rules),
        )
        return True
