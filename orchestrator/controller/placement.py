"""Placement candidates from the catalog, and the spot / on-demand choice at launch time.

Spot is taken whenever the market has capacity for at least ``min`` nodes. Without it, a job in
``spot-with-fallback`` mode goes on-demand only when the deadline needs it: when the time left no
longer covers the work left plus a safety margin of two changeovers. Otherwise it waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.backends.base import Placement, Progress
from orchestrator.catalog.offers import MarketKind, Offer, find_offers
from orchestrator.errors import UserError
from orchestrator.spec import GpuChoice, JobSpec, MarketMode

CHANGEOVER = timedelta(minutes=12)
"""Time a relaunch costs (new nodes, setup, work since the last checkpoint); as in the NSDI'24 model."""


@dataclass(frozen=True)
class MarketChoice:
    placement: Placement
    nodes: int
    why: str


def placement_candidates(
    spec: JobSpec, price_note: str = "", offers: Sequence[Offer] | None = None
) -> tuple[Placement | None, Placement | None]:
    """The cheapest spot and on-demand placement for the spec's GPU types (spot, on_demand).

    ``offers``: the price catalog to search (default: the built-in one plus nothing else).
    """
    best: dict[MarketKind, tuple[float, Placement]] = {}
    types = spec.resources.gpu_types
    for rank, gpu_type in enumerate(types):
        found = find_offers(
            gpu_type, offers=offers, cloud=spec.market.cloud, regions=spec.market.regions, zones=spec.market.zones
        )
        exact = [o for o in found if o.gpu_count == spec.resources.gpus_per_node]
        found = exact or found  # price by a bigger instance's per-GPU rate only when no exact size exists
        for market in MarketKind:
            for offer in found:
                placement = _placement(offer, market, spec.resources.gpus_per_node, price_note)
                if placement is None:
                    continue
                # "ordered": an earlier type always wins; "cheapest": the price decides.
                key = placement.node_price_usd_per_hour
                if spec.resources.gpu_choice is GpuChoice.ORDERED:
                    key += rank * 1e6
                if market not in best or key < best[market][0]:
                    best[market] = (key, placement)
    if not best:
        where = ", ".join(spec.market.zones or spec.market.regions) or "any region"
        raise UserError(
            f"no offer of {', '.join(types)} in {where}",
            "allow more zones or regions, or other GPU types (see `gpuctl gpus`)",
        )
    spot = best.get(MarketKind.SPOT)
    on_demand = best.get(MarketKind.ON_DEMAND)
    return (spot[1] if spot else None, on_demand[1] if on_demand else None)


def _placement(offer: Offer, market: MarketKind, gpus_per_node: int, note: str) -> Placement | None:
    per_gpu = offer.price_per_gpu(market)
    od_per_gpu = offer.price_per_gpu(MarketKind.ON_DEMAND)
    if per_gpu is None:
        return None
    if od_per_gpu is None:
        od_per_gpu = per_gpu
    instance = offer.instance_type if offer.gpu_count == gpus_per_node else f"{offer.instance_type} (per GPU)"
    return Placement(
        gpu_type=offer.gpu_type,
        market=market,
        cloud=offer.cloud,
        region=offer.region,
        zone=offer.zone,
        instance_type=instance,
        gpus_per_node=gpus_per_node,
        node_price_usd_per_hour=per_gpu * gpus_per_node,
        on_demand_node_price_usd_per_hour=od_per_gpu * gpus_per_node,
        price_source=f"{offer.price_source}{note}",
    )


def choose_market(
    spec: JobSpec,
    spot: Placement | None,
    on_demand: Placement | None,
    spot_capacity: int | None,
    now: datetime,
    deadline: datetime | None,
    progress: Progress | None,
) -> MarketChoice | str:
    """A placement to launch, or a string saying why we wait (``fail:...`` when we never can)."""
    res = spec.resources
    mode = spec.market.mode
    if mode is not MarketMode.ON_DEMAND and spot is not None:
        capacity = res.max_nodes if spot_capacity is None else min(spot_capacity, res.max_nodes)
        if capacity >= res.min_nodes:
            return MarketChoice(spot, capacity, "spot capacity available")
    if mode is MarketMode.ON_DEMAND or (mode is MarketMode.SPOT_WITH_FALLBACK and spot is None):
        if on_demand is None:
            return f"fail:no on-demand offer of {', '.join(res.gpu_types)}"
        return MarketChoice(on_demand, res.max_nodes, "on-demand requested" if mode is MarketMode.ON_DEMAND
                            else "no spot offer")  # fmt: skip
    if mode is MarketMode.SPOT_WITH_FALLBACK and on_demand is not None and _deadline_needs_it(
        spec, now, deadline, progress
    ):
        return MarketChoice(on_demand, res.max_nodes, "no spot capacity and the deadline needs the job running")
    return "waiting for spot capacity"


def _deadline_needs_it(spec: JobSpec, now: datetime, deadline: datetime | None, progress: Progress | None) -> bool:
    if deadline is None:
        return False
    left = deadline - now
    work = spec.goals.compute_hours
    if work is None:
        return True  # unknown work and a deadline: don't gamble on spot coming back
    done = 0.0
    if progress is not None and progress.total_steps:
        done = min(1.0, progress.step / progress.total_steps)
    work_left = timedelta(hours=work * (1.0 - done))
    return left <= work_left + 2 * CHANGEOVER
