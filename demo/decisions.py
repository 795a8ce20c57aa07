"""What the run says of the HPAs' syncs: a line for each decision worth saying, with its reason, named after the
Deployment it scales (``trainer`` or ``chat``)."""

from __future__ import annotations

from demo.hpa import Decision, HpaSpec
from demo.hpa_controller import ExternalSync, Sync

NAME_WIDTH = 7  # the longest name, "trainer": the verbs of both line up


def _verb(decision: Decision) -> str:
    return f"scale {decision.current} → {decision.replicas}" if decision.scales else f"hold at {decision.current}"


def decision_line(name: str, sync: Sync, target: float) -> str:
    """A Pods metric's decision: the average against the target, the ratio, the replicas it gives, what held it."""
    decision, proposal = sync.decision, sync.decision.proposal
    head = f"{sync.at:4.0f}s  {name:<{NAME_WIDTH}}  "
    if proposal.average is None or proposal.ratio is None:
        return f"{head}hold at {decision.current}: {sync.error or proposal.why}"
    why = f"; {decision.why}" if decision.why else ""
    return (
        f"{head}{_verb(decision)}: average {proposal.average:.1f} against a target of {target:g}: "
        f"ratio {proposal.ratio:.2f}; {proposal.why}{why}"
    )


def external_line(name: str, sync: ExternalSync, metric: str, spec: HpaSpec) -> str:
    """An External metric's decision (AverageValue): the sum of its items against the target a replica, the ratio
    to the target for the replicas there are (none from zero), the replicas it gives, what held or bounded it."""
    decision, proposal = sync.decision, sync.decision.proposal
    head = f"{sync.at:4.0f}s  {name:<{NAME_WIDTH}}  "
    if proposal.average is None or proposal.ratio is None:
        return f"{head}hold at {decision.current}: {sync.error or proposal.why}"
    ratio = f"ratio {proposal.ratio:.2f}; " if decision.current and "ratio" not in proposal.why else ""
    why = f"; {decision.why}" if decision.why else ""
    return (
        f"{head}{_verb(decision)}: {metric} {proposal.average:g} against a target of {spec.target:g} a replica: "
        f"{ratio}{proposal.why}{why}"
    )


def worth_saying(decision: Decision, previous: Decision | None) -> bool:
    """Every scaling decision; a hold (the metric asks for a change that does not happen) or no values as they begin."""

    def kind(d: Decision | None) -> str:
        if d is None:
            return ""
        proposal = d.proposal
        if d.scales:
            return "scale"
        if proposal.replicas is None:
            return "no values"
        return "hold" if proposal.replicas != d.current or d.why or proposal.missing else ""

    now = kind(decision)
    return now == "scale" or now not in ("", kind(previous))
