"""Placement candidates from the price catalog: per zone for spot, and the best on-demand offer.

Which of them a job runs on, and when, is the market policy's decision (see ``market_choice``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator.backends.base import OwnPlacements, Placement
from orchestrator.catalog.offers import MarketKind, Offer, find_offers, read_offers_csv
from orchestrator.errors import UserError
from orchestrator.spec import GpuChoice, JobSpec


class NoPlacement(UserError):
    """The spec's GPU types exist, but no offer of them fits its clouds, regions and zones."""


@dataclass(frozen=True)
class Candidates:
    """Where the job may run: the best spot placement of each zone, and the best on-demand one.

    ``spot_by_zone`` is in preference order: the spec's ``market.zones`` order when it lists zones,
    else cheapest first. Market policies choose among these zones.
    """

    spot_by_zone: dict[str, Placement]
    on_demand: Placement | None

    @property
    def cheapest_spot(self) -> Placement | None:
        return min(self.spot_by_zone.values(), key=lambda p: p.node_price_usd_per_hour, default=None)


OfferFilter = Callable[[Offer, MarketKind], bool]
"""Whether an offer may be placed in a market where the backend runs (a Kubernetes cluster's zones)."""


def zone_candidates(
    spec: JobSpec,
    price_note: str = "",
    offers: Sequence[Offer] | None = None,
    allowed: OfferFilter | None = None,
) -> Candidates:
    """The best placement per (market, zone) for the spec's GPU types.

    ``offers``: the price catalog to search (default: the built-in one plus nothing else);
    ``allowed``: only the offers and markets it accepts (:class:`NoPlacement` when none is left).
    """
    best: dict[tuple[MarketKind, str], tuple[float, Placement]] = {}
    types = spec.resources.gpu_types
    for rank, gpu_type in enumerate(types):
        found = find_offers(
            gpu_type,
            offers=offers,
            cloud=spec.market.cloud,
            regions=spec.market.regions,
            zones=spec.market.zones,
        )
        exact = [o for o in found if o.gpu_count == spec.resources.gpus_per_node]
        found = exact or found  # price by a bigger instance's per-GPU rate only when no exact size exists
        for market in MarketKind:
            for offer in found:
                placement = _placement(offer, market, spec.resources.gpus_per_node, price_note)
                if placement is None or (allowed is not None and not allowed(offer, market)):
                    continue
                # "ordered": an earlier type always wins; "cheapest": the price decides.
                key = placement.node_price_usd_per_hour
                if spec.resources.gpu_choice is GpuChoice.ORDERED:
                    key += rank * 1e6
                slot = (market, offer.zone if market is MarketKind.SPOT else "")
                if slot not in best or key < best[slot][0]:
                    best[slot] = (key, placement)
    if not best:
        where = ", ".join(spec.market.zones or spec.market.regions) or "any region"
        raise NoPlacement(
            f"no offer of {', '.join(types)} in {where}",
            "allow more zones or regions, or other GPU types (see `gpuctl gpus`)",
        )
    listed = {zone: i for i, zone in enumerate(spec.market.zones)}
    spot = sorted(
        ((key, p) for (market, _), (key, p) in best.items() if market is MarketKind.SPOT),
        key=lambda kp: (listed.get(kp[1].zone, len(listed)), kp[0], kp[1].zone),
    )
    on_demand = best.get((MarketKind.ON_DEMAND, ""))
    return Candidates({p.zone: p for _, p in spot}, on_demand[1] if on_demand else None)


def candidates_for(spec: JobSpec, own: OwnPlacements | None, price_note: str = "") -> Candidates:
    """The backend's own placements (a SLURM cluster's partitions) when it has them, else the catalog's."""
    return Candidates(dict(own.spot_by_zone), own.on_demand) if own else zone_candidates(spec, price_note)


def catalog_candidates(
    spec: JobSpec, catalog_csv: str | None = None, allowed: OfferFilter | None = None
) -> Candidates:
    """Candidates from the price catalog CSV ``catalog_csv`` (the Helm chart's ``priceCatalog``), else
    the built-in one: what the Kubernetes operator places by (``allowed``: the offers its cluster can
    run), and ``gpuctl submit --backend kubernetes`` admits by."""
    offers = read_offers_csv(catalog_csv, "chart price catalog") if catalog_csv else None
    return zone_candidates(spec, offers=offers, allowed=allowed)


def placement_candidates(
    spec: JobSpec, price_note: str = "", offers: Sequence[Offer] | None = None
) -> tuple[Placement | None, Placement | None]:
    """The cheapest spot and on-demand placement for the spec's GPU types (spot, on_demand)."""
    found = zone_candidates(spec, price_note, offers)
    return found.cheapest_spot, found.on_demand


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
