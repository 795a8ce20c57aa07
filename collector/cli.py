"""``gpuscale-collector``: parse settings, choose real or simulated NVML, run collection and the HTTP server."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from collector.collection import Collection
from collector.counters.configmap import ConfigMapCounters
from collector.counters.legacy_names import OLD_NAMESPACE_LABELS
from collector.counters.source import DCGM_EXPORTER_DEFAULT, CountersSource, InlineCounters, counters_file
from collector.debug_dump import Dumper
from collector.errors import ConfigError
from collector.kube.config import SERVICE_ACCOUNT, KubeAccess
from collector.nvml.api import Nvml
from collector.nvml.gpu_watch import BindWatch, GpuPresence, SysfsGpus
from collector.nvml.reader import NvmlReader
from collector.pods.hpc_jobs import HpcJobs
from collector.self_metrics import Background
from collector.server import answer_for
from collector.settings import FLAGS, Settings, parse_settings
from collector.simulation.nvml import SimulatedNvml
from collector.web.messages import Served
from collector.web.server import HttpServer
from common import listener
from common.freshness import DEFAULT_TIMING
from common.supervisor import Work, supervise

if TYPE_CHECKING:
    # What only some flags use is imported when they are given: pod attribution (-k) brings gRPC and RE2, the web
    # configuration cryptography, bcrypt and YAML; each costs resident memory (docs/collector-bench.md, memory).
    from collector.pods.attribution import Attribution
    from collector.pods.directory import KubePodDirectory, PodDirectory
    from collector.pods.pod_resources import PodResourcesWatcher
    from collector.pods.process_sampler import ProcessSampler
    from collector.pods.resource_slices import KubeResourceSlices

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


def choose_nvml(settings: Settings) -> tuple[Nvml, bool]:
    """The NVML module to read, and whether it is simulated."""
    if settings.simulate_spec:
        from collector.simulation.spec import load_spec

        spec = load_spec(settings.simulate_spec)
        log.warning("serving %d SIMULATED GPUs from %s; no real GPU is read", spec.gpus, settings.simulate_spec)
        return spec.build(), True
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


@dataclass
class Node:
    """What runs in one collector process: the threads (``start``, ``stop``) and what the event loop's tasks
    (``background_work``) keep current."""

    collection: Collection
    watcher: PodResourcesWatcher | None = None
    sampler: ProcessSampler | None = None
    directory: KubePodDirectory | None = None
    slices: KubeResourceSlices | None = None  # with --kubernetes-enable-dra

    def start(self) -> None:
        for part in (self.sampler, self.collection):
            if part is not None:
                part.start()

    def stop(self) -> None:
        for part in (self.collection, self.sampler):
            if part is not None:
                part.stop()


def build_node(
    settings: Settings,
    nvml: Nvml,
    simulated: bool,
    directory: PodDirectory | None = None,
    counters: CountersSource | None = None,
    background: Background | None = None,
    kube: KubeAccess | None = None,
) -> Node:
    """The collection, and with -k the pod mapping: pod-resources watcher, process sampler, pod directory.
    ``counters``: where the counters come from (``counters_source``); the counters file of ``settings`` if None.
    ``background``: where the background work reports (``/health``, the self-metrics); a new one if None.
    ``kube``: where the Kubernetes API is; ``settings``' kubeconfig, else the pod's service account, if None."""
    background = background or Background()
    kube = kube or KubeAccess(settings.kubeconfig)
    bound = DEFAULT_TIMING.bound
    common = ((settings.hostname_label, settings.hostname),) if settings.hostname else ()
    counters = counters or inline_counters(settings) or counters_file(settings.collectors, names=settings.dcgm_names)
    label_names = OLD_NAMESPACE_LABELS if settings.old_namespace else None
    reader = NvmlReader(
        nvml, slow_every=round(settings.slow_interval / settings.interval), interval=settings.interval,
        xid_window=settings.xid_window, clock_events_window=settings.clock_events_window,
        engine_every=round(settings.engine_interval / settings.interval),
    )  # fmt: skip

    hpc_jobs = HpcJobs(settings.hpc_job_mapping_dir) if settings.hpc_job_mapping_dir else None

    def collection(attribution: Attribution | None = None) -> Collection:
        return Collection(reader, counters, interval=settings.interval, common_labels=common,
                          replace_blanks=settings.replace_blanks, help_prefix=SIMULATED_HELP if simulated else "",
                          label_names=label_names,
                          attribution=attribution, hpc_jobs=hpc_jobs, background=background)  # fmt: skip

    if not settings.kubernetes:
        return Node(collection())
    from collector.pods.attribution import Attribution
    from collector.pods.cgroups import CgroupReader
    from collector.pods.directory import KubePodDirectory
    from collector.pods.labels import PodLabelFilter
    from collector.pods.pod_resources import PodResourcesClient, PodResourcesWatcher
    from collector.pods.process_sampler import ProcessSampler
    from collector.pods.resource_slices import KubeResourceSlices

    sources = background.sources
    slices = None
    if settings.dra:
        slices = KubeResourceSlices(settings.node_name, kube, sources.add("dra-resource-slices", bound()))
    client = PodResourcesClient(
        settings.pod_resources_socket, settings.resource_names, timeout=settings.pod_resources_timeout, dra=slices
    )
    watcher = PodResourcesWatcher(
        client, refresh=settings.pod_resources_refresh,
        source=sources.add("pod-resources", bound(settings.pod_resources_refresh)),
    )  # fmt: skip
    sampler = ProcessSampler(reader, window=settings.shared_window, supervised=background)
    labels = PodLabelFilter(settings.pod_label_allowlist) if settings.pod_labels else None
    own_directory = None
    if directory is None:
        own_directory = KubePodDirectory(settings.node_name, kube, labels, sources.add("pod-directory", bound()))
    attribution = Attribution(
        reader, watcher, directory or own_directory, CgroupReader(settings.proc_root), sampler,
        replace_blanks=settings.replace_blanks, pod_uid=settings.pod_uid,
    )  # fmt: skip
    return Node(collection(attribution), watcher, sampler, own_directory, slices)


def main(
    argv: Sequence[str] | None = None, limits: listener.Limits | None = None, service_account: Path = SERVICE_ACCOUNT
) -> None:
    """``limits`` replaces the connection limits of ``common/listener.py``, ``service_account`` the directory of
    the pod's service account (tests, benchmarks)."""
    settings = parse_settings(argv)
    kube = KubeAccess(settings.kubeconfig, service_account)
    configure_logging(settings)
    for key in settings.config_without_effect:
        log.info(
            "%s: %s is accepted and has no effect: DCGM's field watches, their sample retention, the scrape "
            "limit and Go's runtime metrics belong to dcgm-exporter's DCGM and Go runtime",
            settings.config_file,
            key,
        )
    for flag in settings.ignored:
        log.info("%s is accepted and has no effect: %s", flag, FLAGS.flags[flag[2:]].ignored)
    if settings.remote_hostengine:
        log.info("%s", _remote_hostengine_note(settings))
    for flag in _needing_kubernetes(settings):
        log.warning("%s has no effect without --kubernetes (-k): it labels the pods found through the kubelet", flag)
    try:
        serving = None
        if settings.web_config_file:
            from collector.web.serving import WebServing

            serving = WebServing(Path(settings.web_config_file))
        nvml, simulated = choose_nvml(settings)
        background = Background()
        counters = counters_source(settings, background=background, kube=kube)
        node = build_node(settings, nvml, simulated, counters=counters, background=background, kube=kube)
    except ConfigError as e:
        print(f"gpuscale-collector: error: {e}", file=sys.stderr)
        sys.exit(2)
    signal.signal(signal.SIGHUP, lambda *_: _reload(node, counters))
    node.start()
    works, served = background_work(settings, node, counters, nvml)
    answer = answer_for(node.collection, serving.check if serving else None, served)
    server = HttpServer(answer, settings.host or None, settings.port, serving.ssl_context if serving else None,
                        limits or listener.Limits())  # fmt: skip
    failed = None
    try:
        asyncio.run(_serve(server, settings, works, background))
    except listener.ListenError as e:
        failed = e
    finally:
        node.stop()
    if failed is not None:  # after the collection has stopped, so that the error is the last line
        print(f"gpuscale-collector: error: {failed}", file=sys.stderr)
        sys.exit(2)


async def _serve(server: HttpServer, settings: Settings, works: list[Work], background: Background) -> None:
    """Serve until SIGTERM or SIGINT, with ``works`` running, on the bounded listener: at most so many connections,
    each handshake and request head in time and of bounded size, idle connections closed (common/listener.py)."""
    tasks = [asyncio.create_task(supervise(w, background, DEFAULT_TIMING.max_backoff), name=w.name) for w in works]
    try:
        await listener.listen(server, f"{settings.host or '*'}:{settings.port} (-a, --address)")
        log.info("serving /metrics on %s", server.listener.name)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("shutting down: no new connections; finishing the scrapes in flight")
        await server.stop()
        log.info("stopped")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _needing_kubernetes(settings: Settings) -> list[str]:
    """The pod options given without -k, which they act through (as in dcgm-exporter)."""
    if settings.kubernetes:
        return []
    given = {
        "--kubernetes-enable-pod-labels": settings.pod_labels,
        "--kubernetes-pod-label-allowlist-regex": bool(settings.pod_label_allowlist),
        "--kubernetes-enable-pod-uid": settings.pod_uid,
        "--kubernetes-enable-dra": settings.dra,
    }
    return [flag for flag, on in given.items() if on]


# -- dcgm-exporter's other ways to run: counters from a ConfigMap, GPU bind/unbind, debug dumps -----------------


def inline_counters(settings: Settings) -> InlineCounters | None:
    """``--config-file``'s ``metrics.fields``, when it lists them."""
    if settings.inline_counters is None or settings.config_file is None or settings.collectors is not None:
        return None
    return InlineCounters(settings.inline_counters, settings.config_file)


def counters_source(
    settings: Settings,
    default_path: str = DCGM_EXPORTER_DEFAULT,
    background: Background | None = None,
    kube: KubeAccess | None = None,
) -> CountersSource:
    """``-m``'s ConfigMap (read once here: the process does not start without it), else the counters file.
    ``background``: where the ConfigMap's later reads report; ``kube``: where the API is (``build_node``)."""
    if settings.configmap is None:
        return inline_counters(settings) or counters_file(settings.collectors, default_path, settings.dcgm_names)
    if settings.collectors:
        log.info("counters from ConfigMap %s (-m); -f %s is not read", settings.configmap, settings.collectors)
    refresh = settings.configmap_refresh
    freshness = background.sources.add("counters-configmap", DEFAULT_TIMING.bound(refresh)) if background else None
    source = ConfigMapCounters(settings.configmap, kube or KubeAccess(settings.kubeconfig), refresh, source=freshness)
    source.read_first()
    return source


def background_work(
    settings: Settings, node: Node, counters: CountersSource, nvml: Nvml
) -> tuple[list[Work], Served | None]:
    """The tasks on the event loop: the kubelet's pod-resources refresh, the pod and ResourceSlice watches (-k), and
    those of -m, --enable-gpu-bind-unbind-watch and --dump-enabled; and what hears of every answer sent (the dumps,
    to dump what a scrape was served)."""
    tasks: list[Work] = []
    served = None
    if node.watcher is not None:
        tasks.append(Work("pod-resources", node.watcher.run, node.watcher.source))
    if node.directory is not None:
        tasks.append(Work("pod-directory", node.directory.run, node.directory.source))
    if node.slices is not None:
        tasks.append(Work("dra-resource-slices", node.slices.run, node.slices.source))
    sources = node.collection.background.sources
    if isinstance(counters, ConfigMapCounters):
        tasks.append(Work("counters-configmap", counters.run, counters.source))
    if settings.bind_watch:
        presence: GpuPresence = nvml if isinstance(nvml, SimulatedNvml) else SysfsGpus()
        interval = settings.bind_poll_interval
        watch = BindWatch(presence, node.collection.request_rescan, interval,
                          source=sources.add("gpu-bind-watch", DEFAULT_TIMING.bound(interval)))  # fmt: skip
        tasks.append(Work("gpu-bind-watch", watch.run, watch.source))
    if settings.dump_enabled:
        reader = node.collection.reader
        dumper = Dumper(
            Path(settings.dump_directory), settings.dump_retention, settings.dump_compression,
            devices=lambda: (reader.driver_version, reader.gpus),
        )  # fmt: skip
        log.info("debug dumps enabled (--dump-enabled): a scrape of a new collection writes two files to %s",
                 dumper.describe())  # fmt: skip
        served = dumper.on_response(lambda: (node.collection.latest.families, node.collection.latest.taken_at))
        tasks.append(Work("debug-dumps", dumper.run))
    return tasks, served


def _reload(node: Node, counters: CountersSource) -> None:
    """SIGHUP: the counters again (a ConfigMap is read again first) and every watched file."""
    if isinstance(counters, ConfigMapCounters):
        counters.request_refresh()
    node.collection.request_reload()


def _remote_hostengine_note(settings: Settings) -> str:
    """What -r does here, truly: it names the host, it does not choose which GPUs are read."""
    read = (
        f"-r {settings.remote_hostengine}: GPUs are read through this machine's NVML, not from a DCGM host engine there"
    )
    if settings.hostname is None:
        return f"{read}; no host label (-n)"
    if settings.kubernetes:
        return f"{read}; with -k the {settings.hostname_label} label stays the node name, as in dcgm-exporter"
    return f"{read}; the {settings.hostname_label} label is {settings.hostname!r}, as dcgm-exporter sets it"
