"""``gpuscale-adapter``: serve the metrics APIs (default), or ``explain`` one request from the terminal.

gpuscale-adapter [serve] [flags]
gpuscale-adapter explain [flags] [--json] /apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization

A first argument /adapter (prometheus-adapter's binary, which its Helm chart passes first) is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import signal
import sys
import urllib.parse
from collections.abc import Sequence

from adapter.app import create_app
from adapter.components import COMPONENTS, components
from adapter.errors import AdapterError, BadRequest, ConfigError
from adapter.flags import FLAGS
from adapter.http.health import STOPPING
from adapter.keda.metadata import SCALER_REQUEST, scaler_request_path
from adapter.provider.explain import explain, render_text
from adapter.security import tls
from adapter.security.auth import DISABLED_WARNING
from adapter.serving import event_loop, server_log
from adapter.settings import Settings, parse_settings, usage
from common import connections
from common.flags import package_version, plain, usage_error
from common.heap import map_large_blocks

log = logging.getLogger("adapter")

PROMETHEUS_ADAPTER_BINARY = "/adapter"


def _logging(verbosity: int) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if verbosity >= 4 else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    server_log.install(tracebacks=verbosity >= 4)


EXPLAIN_HELP = """usage: gpuscale-adapter explain [flags] [--json] PATH

Explain one metrics request as the adapter would answer it: which rule matched, the PromQL sent to which backend,
what came back, the objects the request covers, and why an item is missing. Exits 1 when the answer would be an
error, 0 otherwise.

arguments:
  PATH      the request path as the HPA or kubectl asks it, quoted for the shell, for example
            '/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer'
            (the same path under /explain, as the HTTP endpoint takes it, works too); or a KEDA trigger's
            question to the external scaler, as keda/NAMESPACE with the trigger's metadata as the query, for
            example 'keda/ml?metricName=gpu_utilization&labelSelector=app%3Dtrainer&targetValue=70'
  --json    print the report as JSON instead of text
  flags     the adapter's flags that say where the answer comes from: --prometheus-url (required), --config,
            --lister-kubeconfig, --prometheus-backend, ... (every flag of gpuscale-adapter --help; those for serving,
            TLS and authentication have no effect here)
"""
SWITCH_INTERVAL = 0.0005  # seconds a thread holds the GIL while another waits for it (Python's default: 0.005)


def serving_tls(settings: Settings) -> tls.ServingTLS | None:
    """The serving certificate; None for plain HTTP (--insecure-serve-http), which needs none."""
    if settings.insecure_serve_http:
        return None
    return tls.serving_tls(settings.tls, request_certs=not settings.insecure_disable_auth)


async def _serve(settings: Settings, limits: connections.Limits) -> None:
    serving = serving_tls(settings)
    ssl_context = serving.context if serving else None
    if settings.insecure_disable_auth:
        log.warning("%s", DISABLED_WARNING)
    app = create_app(settings, serving=serving, limits=limits)
    access_log = logging.getLogger("aiohttp.access") if settings.verbosity >= 6 else None
    runner = connections.runner(app, limits, access_log)
    served = False
    try:
        # inside: a part that fails to start (KEDA's port taken) leaves those started before it to be closed
        await runner.setup()
        site = connections.BoundedSite(
            runner, settings.bind_address, settings.secure_port, ssl_context=ssl_context, limits=limits
        )
        await connections.listen(
            site, f"{settings.bind_address}:{settings.secure_port} (--bind-address, --secure-port)"
        )
        # the long-lived objects made at start (modules, rules, caches) need no more collection passes; without
        # this, every full pass walks them while a large Prometheus answer is being decoded
        gc.freeze()
        # Large answers (a relist's series listings, megabytes each) are read in worker threads. The event loop gives
        # up the GIL at every socket call and waits up to one switch interval to get it back while a reader runs:
        # with Python's 5 ms, requests answered beside a reader took 6.4 ms at p50 and 16 at p99; with 0.5 ms,
        # 1.2 and 5.9, and the reader read as many listings a second (bench/gil_convoy.py)
        sys.setswitchinterval(SWITCH_INTERVAL)
        scheme = "https" if ssl_context else "http"
        log.info("serving on %s", ", ".join(f"{scheme}://{a[0]}:{a[1]}" for a in runner.addresses))
        served = True
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        def reload() -> None:
            c = app[COMPONENTS]
            if c.rules_file.reload():
                c.discovery.wake()

        loop.add_signal_handler(signal.SIGHUP, reload)
        await stop.wait()
        app[STOPPING].set()
        if settings.shutdown_delay:
            await _linger(stop, settings.shutdown_delay)
        log.info("shutting down: no new connections; finishing the requests in flight")
    finally:
        await runner.cleanup()
        if served:  # a start that failed says only why: "stopped" above the reason would read as the news
            log.info("stopped")


async def _linger(stop: asyncio.Event, delay: float) -> None:
    """Serve on, /readyz failing, while the Service's endpoints drop this replica: the aggregator goes on sending it
    requests until its endpoint informer hears of that, and a port closed before then refuses them. A second
    signal ends the wait."""
    log.info("shutting down in %gs, serving until then with /readyz failing (--shutdown-delay-duration)", delay)
    stop.clear()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), delay)


async def _explain(settings: Settings, target: str, as_json: bool) -> int:
    split = urllib.parse.urlsplit(target)
    query = dict(urllib.parse.parse_qsl(split.query, keep_blank_values=True))
    raw_path = split.path.removeprefix("/explain")
    try:
        scaler = scaler_request_path(raw_path, query)
    except BadRequest as e:
        print(f"gpuscale-adapter explain: {e}", file=sys.stderr)
        return 2
    if scaler is not None:  # a KEDA trigger's question: explained as the same question over HTTP
        if not as_json:
            print(f"the scaler request {target} asks what {scaler} asks\n")
        split = urllib.parse.urlsplit(scaler)
        query = dict(urllib.parse.parse_qsl(split.query, keep_blank_values=True))
        raw_path = split.path
    async with components(settings) as c:
        await c.rest_mapper.refresh()
        await c.discovery.relist()
        report = await explain(c.provider, raw_path, query)
    print(json.dumps(report, indent=2) if as_json else render_text(report))
    answer = report.get("answer")
    return 1 if isinstance(answer, dict) and answer.get("kind") == "Status" else 0


def main(argv: Sequence[str] | None = None, limits: connections.Limits | None = None) -> int:
    """``limits`` replaces the connection limits of ``common/connections.py`` (tests, benchmarks)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == PROMETHEUS_ADAPTER_BINARY:
        args.pop(0)  # prometheus-adapter's Helm chart names its binary as the first argument; Go ignores it
    command = args.pop(0) if args and args[0] in ("serve", "explain") else "serve"
    if "--version" in args:  # -v is klog's verbosity here, as in prometheus-adapter
        print(f"gpuscale-adapter version {package_version()}")
        return 0
    if any(a in ("-h", "--help") for a in args):
        print(EXPLAIN_HELP if command == "explain" else plain(__doc__) + "\n" + usage(), end="")
        return 0
    target = ""
    as_json = "--json" in args
    if command == "explain":
        args = [a for a in args if a != "--json"]
        paths = [a for a in args if a.startswith(("/apis/", "/explain/apis/", SCALER_REQUEST, "/" + SCALER_REQUEST))]
        if len(paths) != 1:
            print(
                f"gpuscale-adapter explain: give one request path, starting /apis/, or a scaler request, "
                f"{SCALER_REQUEST}NAMESPACE?metricName=...",
                file=sys.stderr,
            )
            return 2
        target = paths[0]
        args.remove(target)
    try:
        settings = parse_settings(args)
    except ConfigError as e:
        print(usage_error("gpuscale-adapter", str(e)), file=sys.stderr)
        return 2
    _logging(settings.verbosity)
    for name in settings.ignored_flags:
        log.info("%s is accepted and has no effect: %s", name, FLAGS.flags[name[2:]].ignored)
    try:
        if command == "explain":
            return event_loop.run(_explain(settings, target, as_json))
        map_large_blocks()  # Prometheus answers' buffers unmapped when freed, not kept in the threads' heaps
        event_loop.run(_serve(settings, limits or connections.Limits()))
    except connections.ListenError as e:
        print(f"gpuscale-adapter: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:
        log.error("%s", e)
        return 2
    except AdapterError as e:
        log.error("%s", e)
        return 1
    return 0
