"""The price catalog: GPU offers per cloud, region and zone."""

from orchestrator.catalog.offers import MarketKind, Offer, builtin_offers, find_offers

__all__ = ["MarketKind", "Offer", "builtin_offers", "find_offers"]
