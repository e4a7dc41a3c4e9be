"""What a node is bought as: a spot (reclaimable) or an on-demand node.

The spec's ``market.mode`` (:class:`~orchestrator.spec.model.MarketMode`) says which a job accepts; a
placement's :class:`MarketKind` says which one an attempt got. Catalog offers, placements, segments and
the ledger all use this one type (``orchestrator.catalog.offers`` re-exports it).
"""

from __future__ import annotations

from enum import StrEnum


class MarketKind(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"
