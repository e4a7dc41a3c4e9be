"""Cost-cutting policies: market and zone, rescale, right-size. (Resume needs no policy object: the
runtime always resumes from the newest complete checkpoint, and the market policy places the attempt.)

The controller's entry points::

    policy = market_policy(spec_policy_name or DEFAULT_POLICY)
    history = history.updated(tick_h, {zone: capacity > 0 for zone, capacity in ...})
    decision = policy.decide(MarketContext(...))      # -> MarketDecision(market, zone, policy)
    nodes = rescale_target(available, min_nodes, max_nodes, current_nodes)  # spot nodes to run on
"""

from orchestrator.policies.base import MarketPolicy
from orchestrator.policies.context import MarketContext, MarketDecision, ZoneHistory
from orchestrator.policies.market import DEFAULT_POLICY, POLICIES, market_policy
from orchestrator.policies.rescale import relative_throughput, rescale_target
from orchestrator.policies.rightsize import GpuMeasurement, RightSizeChoice, right_size

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "GpuMeasurement",
    "MarketContext",
    "MarketDecision",
    "MarketPolicy",
    "RightSizeChoice",
    "ZoneHistory",
    "market_policy",
    "relative_throughput",
    "rescale_target",
    "right_size",
]
