"""Run several policies and the omniscient optimum on the same start points; summarise as means."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from orchestrator.policies.daily import MARKET_LOG_H
from orchestrator.policies.market import DEFAULT_POLICY, POLICIES, market_policy
from orchestrator.policies.omniscient import omniscient
from orchestrator.policies.simulator import SimJob, SimResult, simulate, start_points
from orchestrator.policies.traces import AvailabilityTrace

Progress = Callable[[str, int, int], None]
"""Told ``(what runs now, runs done, runs in all)`` before each run, and ``("done", n, n)`` at the end."""

RESCALE_NAME = "rescale"
WAIT_ALL_NAME = "wait-for-all"


def resolve_policy_names(names: Sequence[str]) -> list[str]:
    """``all`` or no names: every policy; otherwise the named ones (validated), default included."""
    if not names or "all" in names:
        return list(POLICIES)
    for n in names:
        market_policy(n)
    return list(dict.fromkeys(names))


def _mean(values: np.ndarray) -> float | None:
    if values.size == 0 or np.all(np.isnan(values)):
        return None
    return float(np.nanmean(values))


def summarise(result: SimResult, on_demand_cost: float) -> dict[str, float | None]:
    cost = float(np.mean(result.cost_usd))
    return {
        "cost_usd": cost if math.isfinite(cost) else None,
        "cost_vs_on_demand": cost / on_demand_cost if math.isfinite(cost) else None,
        "deadline_met_fraction": float(np.mean(result.deadline_met)),
        "spot_hours": _mean(result.spot_h),
        "on_demand_hours": _mean(result.on_demand_h),
        "preemptions": _mean(result.preemptions),
    }


def evaluate(
    trace: AvailabilityTrace,
    job: SimJob,
    policy_names: Sequence[str],
    starts: int,
    seed: int,
    with_omniscient: bool = True,
    market_log_h: float = MARKET_LOG_H,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The ``gpuctl simulate -o json`` document.

    Elastic jobs (``min_nodes < max_nodes``) also get ``rescale`` (the default policy running on the
    nodes available, down to min) and ``wait-for-all`` (the same policy needing max nodes). Every
    start point is given ``market_log_h`` hours of the trace before it (less near the trace's start;
    a week by default), as a controller that watched the zones would know them. ``progress`` is told
    of each run (a policy, or the optimum) as it starts.
    """
    job.validate()
    points = start_points(trace, job, starts, seed)
    od_cost = job.on_demand_cost(trace.tick_h)
    fixed = SimJob(**{**job.__dict__, "min_nodes": job.max_nodes})
    names = resolve_policy_names(policy_names)
    runs = [(name, name, fixed) for name in names]
    if job.min_nodes < job.max_nodes:
        runs += [(RESCALE_NAME, DEFAULT_POLICY, job), (WAIT_ALL_NAME, DEFAULT_POLICY, fixed)]
    total = len(runs) + int(with_omniscient)
    tell = progress or (lambda what, done, of: None)
    policies: dict[str, Any] = {}
    for done, (label, policy_name, sim_job) in enumerate(runs):
        tell(label, done, total)
        result = simulate(market_policy(policy_name), trace, sim_job, points, market_log_h=market_log_h)
        policies[label] = summarise(result, od_cost)
    doc: dict[str, Any] = {"policies": policies}
    doc["omniscient"] = None
    if with_omniscient:
        tell("omniscient", len(runs), total)
        doc["omniscient"] = summarise(omniscient(trace, fixed, points), od_cost)
    tell("done", total, total)
    doc["default_policy"] = DEFAULT_POLICY
    doc["starts"] = int(starts)
    doc["on_demand_only_cost_usd"] = od_cost
    return doc


def savings_share(default_cost_ratio: float | None, omniscient_cost_ratio: float | None) -> float | None:
    """(1 - default cost) / (1 - omniscient cost), both as fractions of the on-demand cost."""
    if default_cost_ratio is None or omniscient_cost_ratio is None or omniscient_cost_ratio >= 1.0:
        return None
    return (1.0 - default_cost_ratio) / (1.0 - omniscient_cost_ratio)
