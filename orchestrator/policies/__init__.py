"""Cost-cutting policies: market and zone, resume, rescale, right-size.

The controller's entry points::

    policy = market_policy(spec_policy_name or DEFAULT_POLICY)
    history = history.updated(tick_h, {zone: capacity > 0 for zone, capacity in ...})
    decision = policy.decide(MarketContext(...))      # -> MarketDecision(market, zone, policy)
    nodes = rescale_target(available, min_nodes, max_nodes, current_nodes)
    plan = plan_resume(checkpoints, decision, min_nodes=..., max_nodes=..., spot_nodes_available=...)
"""

from orchestrator.policies.context import MarketContext, MarketDecision, ZoneHistory
from orchestrator.policies.market import DEFAULT_POLICY, POLICIES, MarketPolicy, market_policy
from orchestrator.policies.rescale import relative_throughput, rescale_target
from orchestrator.policies.resume import CheckpointInfo, ResumePlan, plan_resume
from orchestrator.policies.rightsize import GpuMeasurement, RightSizeChoice, right_size

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "CheckpointInfo",
    "GpuMeasurement",
    "MarketContext",
    "MarketDecision",
    "MarketPolicy",
    "ResumePlan",
    "RightSizeChoice",
    "ZoneHistory",
    "market_policy",
    "plan_resume",
    "relative_throughput",
    "rescale_target",
    "right_size",
]
