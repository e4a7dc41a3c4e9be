"""GPU offers: instance types with their GPUs and prices, per cloud, region and zone.

The built-in catalog comes from public list prices (see ``data/SOURCE.md``); ``gpuctl catalog
refresh`` may write a local override with live prices.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path

from orchestrator.errors import UserError


class MarketKind(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"


@dataclass(frozen=True)
class Offer:
    cloud: str
    instance_type: str
    gpu_type: str
    gpu_count: int
    gpu_memory_gib: float
    vcpus: float
    memory_gib: float
    on_demand_usd_per_hour: float | None
    spot_usd_per_hour: float | None
    region: str
    zone: str
    price_source: str = "built-in list prices"

    def price(self, market: MarketKind) -> float | None:
        return self.spot_usd_per_hour if market is MarketKind.SPOT else self.on_demand_usd_per_hour

    def price_per_gpu(self, market: MarketKind) -> float | None:
        p = self.price(market)
        return None if p is None else p / self.gpu_count


def _opt_float(text: str) -> float | None:
    return float(text) if text.strip() else None


def read_offers_csv(path: Path | str, source: str) -> list[Offer]:
    with open(path, newline="", encoding="utf-8") as fh:
        return [
            Offer(
                cloud=row["cloud"],
                instance_type=row["instance_type"],
                gpu_type=row["accelerator"],
                gpu_count=int(row["accelerator_count"]),
                gpu_memory_gib=float(row["gpu_memory_gib"]),
                vcpus=float(row["vcpus"]),
                memory_gib=float(row["memory_gib"]),
                on_demand_usd_per_hour=_opt_float(row["on_demand_usd_per_hour"]),
                spot_usd_per_hour=_opt_float(row["spot_usd_per_hour"]),
                region=row["region"],
                zone=row["zone"] or row["region"],
                price_source=source,
            )
            for row in csv.DictReader(fh)
        ]


@cache
def builtin_offers() -> tuple[Offer, ...]:
    folder = resources.files("orchestrator.catalog") / "data"
    out: list[Offer] = []
    for cloud in ("aws", "gcp", "azure"):
        with resources.as_file(folder / f"{cloud}_gpu.csv") as path:
            out.extend(read_offers_csv(path, "built-in list prices"))
    return tuple(out)


def gpu_types(offers: Iterable[Offer]) -> list[str]:
    return sorted({o.gpu_type for o in offers})


def find_offers(
    gpu_type: str,
    *,
    offers: Iterable[Offer] | None = None,
    gpus_per_node: int | None = None,
    cloud: str | None = None,
    regions: Iterable[str] = (),
    zones: Iterable[str] = (),
) -> list[Offer]:
    """Offers of ``gpu_type`` (case-insensitive), optionally with exactly ``gpus_per_node`` GPUs."""
    pool = list(offers if offers is not None else builtin_offers())
    known = {o.gpu_type.lower(): o.gpu_type for o in pool}
    if gpu_type.lower() not in known:
        raise UserError(
            f"unknown GPU type '{gpu_type}'",
            f"use one of {', '.join(gpu_types(pool))} (see `gpuctl gpus`)",
        )
    name = known[gpu_type.lower()]
    region_set, zone_set = set(regions), set(zones)
    return [
        o
        for o in pool
        if o.gpu_type == name
        and (gpus_per_node is None or o.gpu_count == gpus_per_node)
        and (cloud is None or o.cloud == cloud)
        and (not region_set or o.region in region_set)
        and (not zone_set or o.zone in zone_set)
    ]
