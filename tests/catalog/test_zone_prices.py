"""A zone named by a trace is priced from its own catalog row, else from its region (with a note),
never from another zone's row."""

from __future__ import annotations

import statistics

import pytest

from orchestrator.catalog.offers import MarketKind, Offer
from orchestrator.catalog.zone_prices import region_of_zone, zone_price
from orchestrator.errors import UserError


def offer(zone: str, region: str, spot: float | None, gpus: int = 1, gpu: str = "V100") -> Offer:
    return Offer("aws", f"p3.{gpus}x", gpu, gpus, 16, 8, 61, 3.0 * gpus, spot, region, zone)


OFFERS = [
    offer("use1-az1", "us-east-1", 0.50),
    offer("use1-az2", "us-east-1", 0.70),
    offer("use1-az3", "us-east-1", None),  # no spot there
    offer("use1-az4", "us-east-1", 0.90),
    offer("use2-az2", "us-east-2", 0.10),  # the cheapest anywhere: never a us-east-1 zone's price
    offer("eastus", "eastus", 2.0),  # a region-only row (Azure: no zones)
]


@pytest.mark.parametrize(
    ("zone", "region"),
    [
        ("us-east-1c", "us-east-1"),  # AWS zone name: region + letter
        ("us-central1-a", "us-central1"),  # GCP zone: region + '-' + letter
        ("eastus", "eastus"),  # a region-only cloud
        ("use1-az1", None),  # an AZ ID is no zone *name*: found by its row, not here
        ("us-east-10a", None),  # not us-east-1's
        ("mars-1a", None),
    ],
)
def test_region_of_zone(zone: str, region: str | None) -> None:
    assert region_of_zone(zone, ["us-east-1", "us-central1", "eastus", "us-east-2"]) == region


def test_a_zone_with_a_row_is_priced_from_it() -> None:
    price = zone_price("V100", "use1-az2", MarketKind.SPOT, 1, offers=OFFERS)
    assert price is not None and price.node_usd_per_hour == 0.70 and price.note == ""
    assert price.source == "1 x V100, aws use1-az2 p3.1x, built-in list prices"


def test_a_zone_without_a_row_is_priced_from_its_region_and_says_so() -> None:
    price = zone_price("V100", "us-east-1c", MarketKind.SPOT, 1, offers=OFFERS)
    assert price is not None and price.region == "us-east-1"
    assert price.node_usd_per_hour == statistics.median([0.50, 0.70, 0.90]) != 0.10
    assert price.note == (
        "no catalog row for zone us-east-1c: priced from its region us-east-1 "
        "(the catalog's zones there: use1-az1, use1-az2, use1-az3, use1-az4)"
    )
    assert "region us-east-1 (median of 3 zones)" in price.source
    region_row = zone_price("V100", "eastus", MarketKind.SPOT, 4, offers=OFFERS)  # per GPU of a 1-GPU row
    assert region_row is not None and region_row.node_usd_per_hour == 8.0 and region_row.note == ""
    assert "(per GPU)" in region_row.source


def test_no_row_and_no_region_is_none_and_an_unknown_gpu_type_an_error() -> None:
    assert zone_price("V100", "mars-1a", MarketKind.SPOT, 1, offers=OFFERS) is None
    assert zone_price("V100", "use1-az3", MarketKind.SPOT, 1, offers=OFFERS) is None  # its row has no spot
    with pytest.raises(UserError, match="unknown GPU type 'Z9'"):
        zone_price("Z9", "us-east-1c", MarketKind.SPOT, 1, offers=OFFERS)


def test_the_built_in_catalog_prices_the_shared_traces_zones_from_their_regions() -> None:
    for zone in ("us-east-1a", "us-east-1c", "us-east-2a", "us-west-2b"):
        price = zone_price("V100", zone, MarketKind.SPOT, 1)
        assert price is not None and price.region == zone[:-1] and price.note, zone
        assert {o.region for o in price.offers} == {zone[:-1]}


def test_a_zone_whose_row_has_no_price_in_the_market_has_no_offer_there() -> None:
    rows = [*OFFERS, offer("us-east-1c", "us-east-1", None)]
    assert zone_price("V100", "us-east-1c", MarketKind.SPOT, 1, offers=rows) is None
    on_demand = zone_price("V100", "us-east-1c", MarketKind.ON_DEMAND, 1, offers=rows)
    assert on_demand is not None and on_demand.region is None
