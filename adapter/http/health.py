"""The health endpoints, in Kubernetes' format: ``/livez`` and ``/healthz`` answer while the process does; ``/readyz``
checks what the answers depend on.

``/readyz`` has one line per check: ``discovery`` (API discovery has been read and a relist has run; a failed or
stale relist, an empty catalog, stale API discovery or a stale rules-file check are reported but do not fail it, see
``self_metrics.ADVISORY_CHECKS``), ``object-cache`` (pods, namespaces and nodes listed and
not stale), ``authentication`` (the configuration loaded; the ConfigMap and the CA-file checks not stale),
``shutdown`` (from the first SIGTERM on, while the adapter still serves for ``--shutdown-delay-duration``, a check
that fails, as in Kubernetes' API servers), ``held-answers`` (with ``--backend-failure-hold``: how many answers stand
in for a failing Prometheus and how old the oldest is; it never fails, and while answers are held ``/readyz`` lists
its checks without ``?verbose`` too), and one per other background source, such as ``serving-certificate``
(``common/freshness.py`` says when a source is stale). The endpoints are open to everyone, since probes carry no
credentials, so a failed check says why only to a caller that authenticates (or to everyone with
``--insecure-disable-auth``); anyone else reads ``reason withheld``, as kube-apiserver answers: a backend's error
text can quote a request or name an internal address.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp import web

from adapter.components import COMPONENTS, Components
from adapter.security.auth import DISABLED_WARNING, SECURITY, Security, caller

# set on the first SIGTERM: the replica is leaving, so the Service should stop sending it requests
STOPPING = web.AppKey("stopping", asyncio.Event)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool = True
    detail: str = ""  # why it failed; for a check that passes, a note
    said: str = ""  # a note for every caller: it names no backend, address or request

    def line(self, detailed: bool) -> str:
        if self.ok:
            notes = [self.said] if self.said else []
            notes += [self.detail] if detailed and self.detail else []
            return f"[+]{self.name} ok" + "".join(f", {note}" for note in notes)
        return f"[-]{self.name} failed: {self.detail if detailed else 'reason withheld'}"


def _discovery(c: Components) -> Check:
    """Passes once API discovery and a relist have run, whatever they found: the metrics APIs answer from the
    catalog either way (never an error, which would take the APIService away). What is wrong with the backends is
    said here, and in the log."""
    if not c.rest_mapper.attempted:
        return Check("discovery", False, "API discovery has not been read yet")
    if not c.discovery.attempted:
        return Check("discovery", False, "no relist has run yet")
    catalog = c.discovery.catalog
    notes = [f"the last relist failed, the metrics found before are served: {catalog.error}"] if catalog.error else []
    if c.discovery.empty:
        notes.append(f"the rules ({catalog.rules.source}) matched no series: the metrics APIs list no metrics")
    return Check("discovery", True, "; ".join(notes))


def _object_cache(c: Components) -> Check:
    if c.objects.api is None:
        return Check("object-cache", True, "no Kubernetes API for objects: wildcards are not filtered")
    waiting = [str(gr) for gr, r in c.objects.reflectors.items() if not r.synced]
    return Check("object-cache", not waiting, f"not listed yet: {', '.join(waiting)}" if waiting else "")


def _authentication(c: Components, security: Security | None) -> Check:
    if c.settings.insecure_disable_auth:
        return Check("authentication", True, DISABLED_WARNING)
    if security is None:
        return Check("authentication", False, "not started")
    ready, detail = security.readiness()
    return Check("authentication", ready, "" if ready else detail)


def _held_answers(c: Components) -> list[Check]:
    """Passes always: every replica sees the same Prometheus, and a replica taken out of the Service would serve no
    held answer at all (with every replica out, the APIService goes away: a cluster-wide discovery failure). Says
    which answers are held, to everyone, and why (Prometheus' error, which may name its address) to callers who
    authenticate."""
    if c.settings.backend_failure_hold <= 0:
        return []
    states = [state for state in c.provider.hold_states() if state.held]
    if not states:
        return [Check("held-answers")]
    count = sum(state.held for state in states)
    apis = ", ".join(f"{state.api} {state.held}" for state in states)
    oldest = max(state.oldest_age for state in states)
    said = (
        f"{count} answer{'s' if count != 1 else ''} held while Prometheus fails ({apis}), the oldest read "
        f"{oldest:.0f}s ago, each served at most {c.settings.backend_failure_hold:g}s after it was read "
        "(--backend-failure-hold)"
    )
    return [Check("held-answers", True, states[-1].error, said)]


def checks(c: Components, security: Security | None, stopping: bool = False) -> list[Check]:
    """The checks of startup, each failed too by its stale sources; a source of no such check adds its own."""
    found = [_discovery(c), _object_cache(c), _authentication(c, security), *_held_answers(c)]
    found += [Check("shutdown", False, "the adapter is shutting down")] if stopping else []
    problems: dict[str, list[str]] = {}
    notes: dict[str, list[str]] = {}  # stale sources of advisory checks (self_metrics.ADVISORY_CHECKS)
    for source in c.metrics.sources:
        problem = source.problem()
        (problems if source.gates_readiness else notes).setdefault(source.check, []).extend(
            [problem] if problem else []
        )
    named = {check.name for check in found}
    found += [Check(name) for name in {*problems, *notes} if name not in named]
    return [_failing(check, problems.get(check.name, []), notes.get(check.name, [])) for check in found]


def _failing(check: Check, problems: list[str], notes: list[str]) -> Check:
    if not problems and not notes:
        return check
    detail = "; ".join(([check.detail] if check.detail else []) + problems + notes)
    return Check(check.name, check.ok and not problems, detail, check.said)


async def livez(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    """``ok``, or one line per check: always with ``?verbose``, when one fails (then 503), and while answers are
    held in Prometheus' place (200: the probe reads the status alone)."""
    c: Components = request.app[COMPONENTS]
    found = checks(c, request.app.get(SECURITY), request.app[STOPPING].is_set())
    ready = all(check.ok for check in found)
    if ready and "verbose" not in request.query and not any(check.said for check in found):
        return web.Response(text="ok")
    # who asks matters only when there is something to say (a token review is not free)
    detailed = any(check.detail for check in found) and (
        c.settings.insecure_disable_auth or await caller(request) is not None
    )
    lines = [check.line(detailed) for check in found]
    lines.append("readyz check passed" if ready else "readyz check failed")
    return web.Response(status=200 if ready else 503, text="\n".join(lines) + "\n")
