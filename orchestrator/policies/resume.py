"""Resume: from which checkpoint and on what placement the next attempt starts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.policies.context import MarketDecision
from orchestrator.policies.rescale import rescale_target


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint as found in storage; ``complete`` is False for one cut off while being written."""

    step: int
    path: str
    complete: bool


@dataclass(frozen=True)
class ResumePlan:
    checkpoint: CheckpointInfo | None
    market: str | None
    zone: str | None
    nodes: int
    reason: str


def newest_complete(checkpoints: Sequence[CheckpointInfo]) -> CheckpointInfo | None:
    """The complete checkpoint with the highest step (ties: the last listed), or None."""
    best: CheckpointInfo | None = None
    for ck in checkpoints:
        if ck.complete and (best is None or ck.step >= best.step):
            best = ck
    return best


def plan_resume(
    checkpoints: Sequence[CheckpointInfo],
    decision: MarketDecision,
    *,
    min_nodes: int,
    max_nodes: int,
    spot_nodes_available: int | None,
) -> ResumePlan:
    """Restart from the newest complete checkpoint on the market policy's placement.

    Spot runs on :func:`rescale_target` nodes (``None`` available = no known limit: ``max_nodes``);
    on-demand runs ``max_nodes``; a wait decision plans no nodes.
    """
    ck = newest_complete(checkpoints)
    skipped = sum(1 for c in checkpoints if not c.complete and (ck is None or c.step > ck.step))
    origin = f"checkpoint step {ck.step} ({ck.path})" if ck else "the beginning (no complete checkpoint)"
    if skipped:
        origin += f", skipping {skipped} newer incomplete one(s)"
    if decision.market is None:
        return ResumePlan(ck, None, None, 0, f"wait ({decision.policy}); will resume from {origin}")
    if decision.market == "spot":
        avail = max_nodes if spot_nodes_available is None else spot_nodes_available
        nodes = rescale_target(avail, min_nodes, max_nodes, 0)
        if nodes == 0:
            return ResumePlan(
                ck, None, None, 0, f"wait: {avail} spot node(s) < min {min_nodes}; resume from {origin}"
            )
        where = f"spot in {decision.zone} on {nodes} node(s)"
    else:
        nodes = max_nodes
        where = f"on-demand on {nodes} node(s)"
    return ResumePlan(
        ck, decision.market, decision.zone, nodes, f"resume from {origin}, {where} ({decision.policy})"
    )
