"""GPU offers: instance types with their GPUs and prices, per cloud, region and zone.

The built-in catalog comes from public list prices (see ``data/SOURCE.md``); ``gpuctl catalog
refresh`` may write a local override with live prices.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import UserError
from orchestrator.spec.market import MarketKind as MarketKind

if TYPE_CHECKING:
    from orchestrator.catalog.quirks import SetAside


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


COLUMNS = (
    "cloud",
    "instance_type",
    "accelerator",
    "accelerator_count",
    "gpu_memory_gib",
    "vcpus",
    "memory_gib",
    "on_demand_usd_per_hour",
    "spot_usd_per_hour",
    "region",
    "zone",
)
"""The columns of a catalog CSV (a live override adds ``price_source``)."""
SIZE_COLUMNS = ("gpu_memory_gib", "vcpus", "memory_gib")
"""Sizes, like prices: finite, 0 or more (a price may also be empty: no offer in that market)."""


class _BadCell(ValueError):
    def __init__(self, column: str, text: str, want: str) -> None:
        super().__init__(f"{column} is {text!r}, not {want}")
        self.column = column


def _number(row: dict[str, str], column: str, want: str) -> float:
    text = (row.get(column) or "").strip()
    try:
        value = float(text)
    except ValueError:
        raise _BadCell(column, text, want) from None
    if not math.isfinite(value) or value < 0:
        raise _BadCell(column, text, want)
    return value


def _price(row: dict[str, str], column: str) -> float | None:
    if not (row.get(column) or "").strip():
        return None
    return _number(row, column, "a price in USD per hour (a finite number, 0 or more, or empty)")


def _gpu_count(row: dict[str, str]) -> int:
    text = (row.get("accelerator_count") or "").strip()
    if not text.isdigit() or int(text) < 1:
        raise _BadCell("accelerator_count", text, "a whole number of GPUs, 1 or more")
    return int(text)


def _offer(row: dict[str, str], source: str) -> Offer:
    sizes = {c: _number(row, c, "a finite number, 0 or more") for c in SIZE_COLUMNS}
    return Offer(
        cloud=row["cloud"],
        instance_type=row["instance_type"],
        gpu_type=row["accelerator"],
        gpu_count=_gpu_count(row),
        gpu_memory_gib=sizes["gpu_memory_gib"],
        vcpus=sizes["vcpus"],
        memory_gib=sizes["memory_gib"],
        on_demand_usd_per_hour=_price(row, "on_demand_usd_per_hour"),
        spot_usd_per_hour=_price(row, "spot_usd_per_hour"),
        region=row["region"],
        zone=row["zone"] or row["region"],
        price_source=source,
    )


def read_offers_csv(path: Path | str, source: str) -> list[Offer]:
    """The offers of a catalog CSV; :class:`UserError` naming the line and column of the first bad
    cell (a price or size that is not a finite number, 0 or more, such as ``nan``, ``inf`` or ``-98``)."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise UserError(
                f"{source} {path}: no column {missing[0]}",
                f"start it with the header line {','.join(COLUMNS)}",
            )
        offers = []
        for row in reader:
            try:
                offers.append(_offer(row, source))
            except _BadCell as err:
                raise UserError(
                    f"{source} {path}, line {reader.line_num}: {err}",
                    f"fix {err.column} on that line (prices: USD per hour, 0 or more; empty for no offer)",
                ) from None
        return offers


@cache
def builtin_offers() -> tuple[Offer, ...]:
    """The built-in list prices, less what their README marks as wrong
    (:mod:`orchestrator.catalog.quirks`)."""
    from orchestrator.catalog.quirks import trusted

    return tuple(trusted(_builtin_rows())[0])


@cache
def _builtin_rows() -> tuple[Offer, ...]:
    folder = resources.files("orchestrator.catalog") / "data"
    out: list[Offer] = []
    for cloud in ("aws", "gcp", "azure"):
        with resources.as_file(folder / f"{cloud}_gpu.csv") as path:
            out.extend(read_offers_csv(path, "built-in list prices"))
    return tuple(out)


def builtin_set_aside() -> list[SetAside]:
    """What :func:`builtin_offers` leaves out of the built-in rows, and why."""
    from orchestrator.catalog.quirks import trusted

    return trusted(_builtin_rows())[1]


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
