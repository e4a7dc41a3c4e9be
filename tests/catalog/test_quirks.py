"""The rows the price data's own README marks as wrong are set aside in one place (issue 32, item 8):
nothing that reads the catalog (placement, `gpuctl gpus`) sees them, and `gpuctl gpus` says why."""

from __future__ import annotations

import pytest

from orchestrator.catalog.offers import MarketKind, builtin_offers, builtin_set_aside, find_offers
from orchestrator.cli.main import main


def test_no_built_in_offer_has_a_spot_price_at_or_above_on_demand() -> None:
    for offer in builtin_offers():
        spot, od = offer.price(MarketKind.SPOT), offer.price(MarketKind.ON_DEMAND)
        assert spot is None or od is None or spot < od, offer


def test_the_azure_h100_size_of_12_gpus_is_left_out_and_its_siblings_have_no_spot_price() -> None:
    azure = find_offers("H100", cloud="azure")
    assert azure and all(o.gpu_count in (1, 2, 8) for o in azure)
    assert all(o.spot_usd_per_hour is None for o in azure)
    assert {(s.instance_type, s.what) for s in builtin_set_aside()} >= {
        ("Standard_ND96isr_H100_v5", "row"),
        ("Standard_NC40ads_H100_v5", "spot price"),
    }


def test_gpus_names_what_it_left_out_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus", "--gpu", "H100"]) == 0
    out = capsys.readouterr().out
    assert "Standard_ND96isr_H100_v5" not in out.split("note:")[0]
    assert "note: azure Standard_ND96isr_H100_v5 (H100, eastus) left out: listed with 12 GPUs" in out
    assert "spot price left out: it equals the on-demand price" in out
    assert "gcp us-central1 H100, A100-80GB prices kept, but suspect" in out
    assert main(["gpus", "--gpu", "H100", "--cloud", "aws"]) == 0
    assert "note:" not in capsys.readouterr().out
