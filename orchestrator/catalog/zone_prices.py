"""The price of one zone, by name: that zone's catalog row, else its region's, never another zone's.

A spot availability trace is named after the zone it was recorded in (``us-east-1c``); the catalog names
zones as the cloud's price lists do (AWS: AZ IDs such as ``use1-az4``, which each AWS account maps to
zone names differently), and some clouds price a region only (Azure: the row's zone is its region).
So a zone the catalog has no row for is priced from its region: the region's own row when it has one,
else the median over the region's zones, and the result says so (:attr:`ZonePrice.note`).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.catalog.offers import MarketKind, Offer, find_offers

_ZONE_SUFFIX = re.compile(r"-?[a-z]")
"""What a zone name adds to its region's: ``us-east-1`` + ``c``, ``us-central1`` + ``-a``."""


@dataclass(frozen=True)
class ZonePrice:
    zone: str
    gpu_type: str
    market: MarketKind
    gpus_per_node: int
    node_usd_per_hour: float
    """For ``gpus_per_node`` GPUs (another size's per-GPU rate when no row has that many)."""
    offers: tuple[Offer, ...]
    """The rows it was priced from: the zone's own (one), or one per zone of the region."""
    region: str | None = None
    """Set when the zone has no row and the price is its region's."""

    region_zones: tuple[str, ...] = ()
    """The catalog's zones of that region (any market), when priced from the region."""

    @property
    def note(self) -> str:
        """Where the price came from, for the user: ``''`` for the zone's own row."""
        if self.region is None:
            return ""
        there = [z for z in self.region_zones if z != self.region]
        named = f" (the catalog's zones there: {', '.join(there)})" if there else ""
        return f"no catalog row for zone {self.zone}: priced from its region {self.region}{named}"

    @property
    def source(self) -> str:
        """The row (or rows) priced from: ``1 x V100, aws use1-az4 p3.2xlarge, built-in list prices``."""
        first = self.offers[0]
        where = first.zone
        if self.region is not None:
            zones = {o.zone for o in self.offers}
            where = f"region {self.region}" + (
                f" (median of {len(zones)} zones)" if zones != {self.region} else ""
            )
        types = sorted({o.instance_type + ("" if o.gpu_count == self.gpus_per_node else " (per GPU)")
                        for o in self.offers})  # fmt: skip
        return f"{self.gpus_per_node} x {self.gpu_type}, {first.cloud} {where} {', '.join(types)}, {first.price_source}"


def region_of_zone(zone: str, regions: Iterable[str]) -> str | None:
    """The region of ``zone`` among ``regions``: the zone itself, or the one it adds a zone letter to."""
    known = set(regions)
    if zone in known:
        return zone
    found = [r for r in known if zone.startswith(r) and _ZONE_SUFFIX.fullmatch(zone[len(r) :])]
    return max(found, key=len, default=None)


def zone_price(
    gpu_type: str,
    zone: str,
    market: MarketKind,
    gpus_per_node: int,
    *,
    offers: Sequence[Offer] | None = None,
    cloud: str | None = None,
) -> ZonePrice | None:
    """The price of ``gpus_per_node`` GPUs of ``gpu_type`` in ``zone`` (by name), or ``None`` when
    neither the zone nor its region has an offer in ``market``. Raises :class:`UserError` for a GPU
    type the catalog does not know."""
    rows = find_offers(gpu_type, offers=offers, cloud=cloud)
    sized = [o for o in rows if o.gpu_count == gpus_per_node] or rows
    priced = [o for o in sized if o.price_per_gpu(market) is not None]
    own = _cheapest([o for o in priced if o.zone == zone], market)
    if own is not None:
        return ZonePrice(
            zone, own.gpu_type, market, gpus_per_node, _node_price(own, market, gpus_per_node), (own,)
        )
    if any(o.zone == zone for o in sized):
        return None  # the zone's rows have no price in this market: it has no such offer
    region = region_of_zone(zone, {o.region for o in rows})
    by_zone = [_cheapest([o for o in priced if o.region == region and o.zone == z], market)
               for z in sorted({o.zone for o in priced if o.region == region})]  # fmt: skip
    chosen = tuple(o for o in by_zone if o is not None)
    if region is None or not chosen:
        return None
    price = statistics.median(_node_price(o, market, gpus_per_node) for o in chosen)
    region_zones = tuple(sorted({o.zone for o in rows if o.region == region}))
    return ZonePrice(zone, chosen[0].gpu_type, market, gpus_per_node, price, chosen, region, region_zones)


def _cheapest(rows: Sequence[Offer], market: MarketKind) -> Offer | None:
    return min(rows, key=lambda o: o.price_per_gpu(market) or 0.0, default=None)


def _node_price(offer: Offer, market: MarketKind, gpus_per_node: int) -> float:
    per_gpu = offer.price_per_gpu(market)
    assert per_gpu is not None  # only priced rows get here
    return per_gpu * gpus_per_node
