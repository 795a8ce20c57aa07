"""``gpuscale-collector``: parse settings, choose real or simulated NVML, run collection and the HTTP server."""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from .collection import Collection
from .errors import ConfigError
from .server import create_app
from .settings import Settings, parse_settings
from .simulated import SimulatedNvml

log = logging.getLogger("collector")

SIMULATED_HELP = "[simulated GPU] "


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            {
                "time": self.formatTime(record),
                "level": record.levelname.lower(),
                "logger": record.name,
                "msg": record.getMessage(),
            }
        )


def configure_logging(settings: Settings) -> None:
    handler = logging.StreamHandler()
    if settings.log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if settings.debug else logging.INFO, handlers=[handler], force=True)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def choose_nvml(settings: Settings) -> tuple[Any, bool]:
    """The NVML module to read, and whether it is simulated."""
    if settings.simulate_gpus:
        log.warning("serving %d SIMULATED GPUs (--simulate-gpus); no real GPU is read", settings.simulate_gpus)
        return SimulatedNvml(settings.simulate_gpus), True
    import pynvml

    if settings.fallback_simulated_gpus:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            log.warning(
                "NVML cannot start (%s): serving %d SIMULATED GPUs (--fallback-simulated-gpus)",
                type(e).__name__,
                settings.fallback_simulated_gpus,
            )
            return SimulatedNvml(settings.fallback_simulated_gpus), True
        pynvml.nvmlShutdown()
    return pynvml, False


def build_collection(settings: Settings, nvml: Any, simulated: bool) -> Collection:
    common = (("Hostname", settings.hostname),) if settings.hostname else ()
    return Collection(
        nvml,
        settings.collectors,
        interval=settings.interval,
        slow_interval=settings.slow_interval,
        common_labels=common,
        replace_blanks=settings.replace_blanks,
        help_prefix=SIMULATED_HELP if simulated else "",
    )


def main(argv: Sequence[str] | None = None) -> None:
    settings = parse_settings(argv)
    configure_logging(settings)
    for flag in settings.ignored:
        log.info("%s is a DCGM setting and has no effect here", flag)
    nvml, simulated = choose_nvml(settings)
    try:
        collection = build_collection(settings, nvml, simulated)
    except ConfigError as e:
        print(f"gpuscale-collector: error: {e}", file=sys.stderr)
        sys.exit(2)
    signal.signal(signal.SIGHUP, lambda *_: collection.request_reload())
    collection.start()
    try:
        web.run_app(
            create_app(collection),
            host=settings.host or None,
            port=settings.port,
            print=lambda *_: log.info("serving /metrics on %s:%d", settings.host or "*", settings.port),
            access_log=None,
        )
    finally:
        collection.stop()
