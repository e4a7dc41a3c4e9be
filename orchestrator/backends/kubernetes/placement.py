"""A simple placement for the operator: the spec's first acceptable GPU type, spot unless forbidden.

The scheduler and node provisioner pick the actual node; the placement only says which labels to ask
for and which list price to book the segment at (cheapest matching catalog offer).
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.backends.base import Placement
from orchestrator.catalog.offers import MarketKind, Offer, find_offers
from orchestrator.errors import UserError
from orchestrator.spec import JobSpec, MarketMode


def initial_market(spec: JobSpec) -> MarketKind:
    return MarketKind.ON_DEMAND if spec.market.mode is MarketMode.ON_DEMAND else MarketKind.SPOT


def choose_placement(
    spec: JobSpec, market: MarketKind | None = None, offers: Sequence[Offer] | None = None
) -> Placement:
    """``offers``: the price catalog to use (default: the built-in one)."""
    market = market or initial_market(spec)
    res = spec.resources
    for gpu_type in res.gpu_types:
        offers = [
            o
            for o in find_offers(
                gpu_type,
                offers=offers,
                gpus_per_node=res.gpus_per_node,
                cloud=spec.market.cloud,
                regions=spec.market.regions,
                zones=spec.market.zones,
            )
            if o.price(market) is not None and o.on_demand_usd_per_hour is not None
        ]
        if offers:
            best: Offer = min(offers, key=lambda o: o.price(market) or 0.0)
            return Placement(
                gpu_type=best.gpu_type,
                market=market,
                cloud=best.cloud,
                region=best.region,
                zone=best.zone,
                instance_type=best.instance_type,
                gpus_per_node=best.gpu_count,
                node_price_usd_per_hour=best.price(market) or 0.0,
                on_demand_node_price_usd_per_hour=best.on_demand_usd_per_hour or 0.0,
                price_source=best.price_source,
            )
    raise UserError(
        f"no catalog offer has {res.gpus_per_node} x {'/'.join(res.gpu_types)} on the {market} market",
        "change resources.gpu_types or gpus_per_node, or market.cloud/regions/zones (see `gpuctl gpus`)",
    )
