"""Live price overrides written by ``gpuctl catalog refresh``, preferred over the built-in catalog.

The override is a CSV in the built-in format plus a ``price_source`` column, stored at
``$GPUCTL_HOME/catalog/aws_override.csv`` (``GPUCTL_HOME`` defaults to ``~/.gpuctl``). A row
replaces the built-in offer with the same cloud, instance type, region and zone.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from orchestrator.catalog.offers import COLUMNS, Offer, builtin_offers, read_offers_csv
from orchestrator.errors import UserError
from orchestrator.home import ensure_home, home_dir

CSV_COLUMNS = [*COLUMNS, "price_source"]


OVERRIDE_FOLDER = "catalog"


def override_path(home: Path | None = None, cloud: str = "aws") -> Path:
    return (home or home_dir()) / OVERRIDE_FOLDER / f"{cloud}_override.csv"


def _price(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def write_override(path: Path, offers: Iterable[Offer]) -> None:
    """Write atomically: a reader never sees half a file."""
    if path.parent.name == OVERRIDE_FOLDER:  # in a gpuctl home: create that as gpuctl homes are
        ensure_home(path.parent.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for o in offers:
            writer.writerow(
                [
                    o.cloud,
                    o.instance_type,
                    o.gpu_type,
                    o.gpu_count,
                    f"{o.gpu_memory_gib:g}",
                    f"{o.vcpus:g}",
                    f"{o.memory_gib:g}",
                    _price(o.on_demand_usd_per_hour),
                    _price(o.spot_usd_per_hour),
                    o.region,
                    o.zone,
                    o.price_source,
                ]
            )
    tmp.replace(path)


def read_override(path: Path) -> list[Offer]:
    try:
        offers = read_offers_csv(path, "live override")
        with open(path, newline="", encoding="utf-8") as fh:
            sources = [row.get("price_source") or "live override" for row in csv.DictReader(fh)]
    except (KeyError, ValueError, TypeError) as exc:
        raise UserError(
            f"price override {path} is damaged ({type(exc).__name__}: {exc})",
            f"run `gpuctl catalog refresh` again, or delete {path} to use the built-in prices",
        ) from exc
    return [dataclasses.replace(o, price_source=s) for o, s in zip(offers, sources, strict=True)]


def _key(o: Offer) -> tuple[str, str, str, str]:
    return (o.cloud, o.instance_type, o.region, o.zone)


def merge_offers(base: Iterable[Offer], override: Iterable[Offer]) -> list[Offer]:
    """``base`` with each offer replaced by the override of the same key; new override keys added."""
    replaced = {_key(o): o for o in override}
    out = [replaced.pop(_key(o), o) for o in base]
    out.extend(replaced.values())
    return out


@lru_cache(maxsize=8)
def _merged(path: Path, mtime_ns: int, size: int) -> tuple[Offer, ...]:
    return tuple(merge_offers(builtin_offers(), read_override(path)))


def current_offers(home: Path | None = None) -> tuple[Offer, ...]:
    """The built-in catalog with the live override under ``home`` applied (cached until it changes).

    Pass it as ``offers=`` to :func:`find_offers` so lookups prefer live prices.
    """
    path = override_path(home, "aws")
    try:
        stat = path.stat()
    except FileNotFoundError:
        return builtin_offers()
    return _merged(path, stat.st_mtime_ns, stat.st_size)
