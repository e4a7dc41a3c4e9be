"""Where an attempt (or a segment of it) runs: one GPU type, market, zone and price.

The one placement type: policies choose it, backends launch on it, the engine keeps it in a job's
state and segments, the store and a GPUJob's status persist it (``orchestrator.backends.base``
re-exports it). Persisted as a JSON object with snake_case keys (the SQLite ``attempts`` rows and a
GPUJob's ``status.placement`` as every version wrote them); keys it does not know are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from pydantic import ConfigDict

from orchestrator.spec.market import MarketKind


@dataclass(frozen=True)
class Placement:
    """Where an attempt runs: one GPU type, market, zone, and the prices of a node-hour there."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="ignore")
    """Its own keys (snake_case) inside the camelCase models that hold it."""

    gpu_type: str
    market: MarketKind
    cloud: str
    region: str
    zone: str
    instance_type: str
    gpus_per_node: int
    node_price_usd_per_hour: float
    on_demand_node_price_usd_per_hour: float
    price_source: str

    @property
    def spot(self) -> bool:
        return self.market is MarketKind.SPOT


PLACEMENT_FIELDS = tuple(f.name for f in fields(Placement))


def flat_placement(segment: Any, **override: Any) -> Placement:
    """The placement held in the fields of the same names of a flat ``segment`` (a ledger record, a
    GPUJob status's segment), ``override`` replacing some (ValueError: a market gpuctl does not know)."""
    values = {name: getattr(segment, name) for name in PLACEMENT_FIELDS} | override
    return Placement(**{**values, "market": MarketKind(values["market"])})
