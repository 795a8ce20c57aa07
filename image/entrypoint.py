"""``gpuscale``: the image's entry point, which picks the program from the container's arguments alone.

A Deployment or DaemonSet written for the image it replaces gives arguments only (``args:``, no ``command:``), so
the arguments must say which program to run:

1. a first argument that names one runs it (and is dropped): ``adapter``, ``gpuscale-adapter`` or ``/adapter``
   (prometheus-adapter's binary, which its Helm chart passes first); ``collector`` or ``gpuscale-collector``;
   ``serve`` and ``explain`` are the adapter's commands and are kept;
2. otherwise the adapter, when an argument is a flag that only the adapter has (prometheus-adapter's Deployments
   always give ``--config``, and ``--prometheus-url``, ``--secure-port``, ``--cert-dir``...);
3. otherwise the collector: dcgm-exporter's DaemonSet gives ``-f <counters file>``, other collector flags, or
   nothing at all.

Our own manifests name the program with ``command:``, which replaces this entry point.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

ADAPTER_NAMES = ("adapter", "gpuscale-adapter", "/adapter")
ADAPTER_COMMANDS = ("serve", "explain")
COLLECTOR_NAMES = ("collector", "gpuscale-collector")


def _spellings(table_flags: Sequence[Sequence[str]]) -> set[str]:
    return {name for names in table_flags for name in names}


def adapter_only_flags() -> set[str]:
    """Every spelling of a flag that the adapter has and the collector has not."""
    from adapter.flags import FLAGS as ADAPTER
    from collector.settings import FLAGS as COLLECTOR

    adapter = _spellings([f.names for f in ADAPTER.flags.values()])
    collector = _spellings([f.names for f in COLLECTOR.flags.values()])
    return adapter - collector


def choose(args: Sequence[str]) -> tuple[str, list[str]]:
    """("adapter" or "collector", the arguments to run it with), by the rule above."""
    rest = list(args)
    if rest and rest[0] in ADAPTER_NAMES:
        return "adapter", rest[1:]
    if rest and rest[0] in ADAPTER_COMMANDS:
        return "adapter", rest
    if rest and rest[0] in COLLECTOR_NAMES:
        return "collector", rest[1:]
    only = adapter_only_flags()
    if any(a.startswith("-") and a.partition("=")[0] in only for a in rest):
        return "adapter", rest
    return "collector", rest


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    program, rest = choose(args)
    if program == "adapter":
        from adapter.cli import main as adapter

        return adapter(rest)
    from collector.cli import main as collector

    collector(rest)
    return 0
