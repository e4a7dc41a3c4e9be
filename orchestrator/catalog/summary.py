"""What is on offer: per GPU type (or per instance type of one GPU), the cheapest prices and saving."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.catalog.offers import MarketKind, Offer, find_offers


@dataclass(frozen=True)
class GpuSummary:
    """One line of ``gpuctl gpus``. Prices are per hour for the whole instance (``gpu_count`` GPUs)."""

    gpu_type: str
    gpu_count: int | None
    """``None`` on the per-type overview, where prices are per GPU."""
    gpu_memory_gib: float
    instance_type: str
    clouds: tuple[str, ...]
    on_demand_usd: float | None
    on_demand_where: str
    spot_usd: float | None
    spot_where: str
    counts: tuple[int, ...]
    price_source: str

    @property
    def saving(self) -> float | None:
        """Share of the on-demand price that the cheapest spot offer saves."""
        if self.on_demand_usd is None or self.spot_usd is None or self.on_demand_usd <= 0:
            return None
        return 1.0 - self.spot_usd / self.on_demand_usd


def _cheapest(offers: list[Offer], market: MarketKind, per_gpu: bool) -> Offer | None:
    priced = [o for o in offers if o.price(market) is not None]
    if not priced:
        return None
    return min(
        priced, key=lambda o: ((o.price_per_gpu(market) if per_gpu else o.price(market)) or 0.0, o.zone)
    )


def _where(o: Offer | None) -> str:
    return "" if o is None else f"{o.cloud} {o.zone}"


def _summary(gpu: str, group: list[Offer], per_gpu: bool, instance: str) -> GpuSummary:
    od, spot = _cheapest(group, MarketKind.ON_DEMAND, per_gpu), _cheapest(group, MarketKind.SPOT, per_gpu)

    def price(o: Offer | None, market: MarketKind) -> float | None:
        if o is None:
            return None
        return o.price_per_gpu(market) if per_gpu else o.price(market)

    sources = sorted({o.price_source for o in (od, spot) if o is not None})
    return GpuSummary(
        gpu_type=gpu,
        gpu_count=None if per_gpu else group[0].gpu_count,
        gpu_memory_gib=max(o.gpu_memory_gib for o in group),
        instance_type=instance,
        clouds=tuple(sorted({o.cloud for o in group})),
        on_demand_usd=price(od, MarketKind.ON_DEMAND),
        on_demand_where=_where(od),
        spot_usd=price(spot, MarketKind.SPOT),
        spot_where=_where(spot),
        counts=tuple(sorted({o.gpu_count for o in group})),
        price_source="; ".join(sources),
    )


def summarize(offers: Iterable[Offer], gpu: str | None = None, cloud: str | None = None) -> list[GpuSummary]:
    """Without ``gpu``: one line per GPU type, prices per GPU. With it: one line per instance type."""
    pool = [o for o in offers if cloud is None or o.cloud == cloud]
    if gpu is None:
        by_type: dict[str, list[Offer]] = defaultdict(list)
        for o in pool:
            by_type[o.gpu_type].append(o)
        return [_summary(g, group, True, "") for g, group in sorted(by_type.items())]
    by_instance: dict[tuple[int, str, str], list[Offer]] = defaultdict(list)
    for o in find_offers(gpu, offers=pool):
        by_instance[(o.gpu_count, o.cloud, o.instance_type)].append(o)
    return [_summary(group[0].gpu_type, group, False, key[2]) for key, group in sorted(by_instance.items())]
