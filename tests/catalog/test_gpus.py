"""`gpuctl gpus`: cheapest prices per GPU type and per instance type, live overrides preferred."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.catalog.offers import MarketKind, Offer, builtin_offers
from orchestrator.catalog.override import current_offers, merge_offers, override_path, write_override
from orchestrator.catalog.summary import summarize
from orchestrator.cli.main import main
from orchestrator.errors import UserError


def offer(
    itype: str, count: int, od: float | None, spot: float | None, zone: str, cloud: str = "aws"
) -> Offer:
    return Offer(cloud, itype, "X1", count, 40, 8, 64, od, spot, "r1", zone)


def test_overview_is_per_gpu_and_picks_cheapest() -> None:
    offers = [
        offer("one", 1, 4.0, 2.0, "z1"),
        offer("eight", 8, 24.0, 9.6, "z2"),
        offer("g", 1, 3.5, None, "z3", "gcp"),
    ]
    [row] = summarize(offers)
    assert row.gpu_count is None and row.counts == (1, 8) and row.clouds == ("aws", "gcp")
    assert row.on_demand_usd == pytest.approx(3.0) and row.on_demand_where == "aws z2"
    assert row.spot_usd == pytest.approx(1.2) and row.saving == pytest.approx(0.6)
    [aws_only] = summarize(offers, cloud="gcp")
    assert aws_only.spot_usd is None and aws_only.saving is None


def test_per_instance_lines_for_one_gpu() -> None:
    rows = summarize(builtin_offers(), gpu="h100", cloud="aws")
    assert rows and all(r.gpu_type == "H100" and r.clouds == ("aws",) for r in rows)
    p5 = next(r for r in rows if r.instance_type == "p5.48xlarge")
    cands = [o for o in builtin_offers() if o.instance_type == "p5.48xlarge" and o.spot_usd_per_hour]
    assert p5.spot_usd == pytest.approx(min(o.price(MarketKind.SPOT) or 0 for o in cands))
    with pytest.raises(UserError, match="unknown GPU type"):
        summarize(builtin_offers(), gpu="H900")


def test_override_replaces_same_zone_only(tmp_path: Path) -> None:
    base = [offer("a", 1, 4.0, 2.0, "z1"), offer("a", 1, 4.0, 2.1, "z2")]
    live = [dataclasses.replace(base[0], spot_usd_per_hour=1.5, price_source="aws live T")]
    merged = merge_offers(base, live)
    assert [o.spot_usd_per_hour for o in merged] == [1.5, 2.1]
    write_override(tmp_path / "o.csv", live)
    assert (tmp_path / "o.csv").read_text().splitlines()[1].endswith("aws live T")


def test_gpus_cli_json_prefers_live_prices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    cheapest = min(
        (o for o in builtin_offers() if o.gpu_type == "V100"), key=lambda o: o.spot_usd_per_hour or 1e9
    )
    live = dataclasses.replace(cheapest, spot_usd_per_hour=0.01, price_source="aws live 2026-03-02T12:00:00Z")
    write_override(override_path(tmp_path), [live])
    assert len(current_offers(tmp_path)) == len(builtin_offers())
    assert main(["gpus", "--gpu", "V100", "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    line = next(r for r in rows if r["instance_type"] == cheapest.instance_type)
    assert line["spot_usd_per_hour"] == pytest.approx(0.01) and "aws live" in line["price_source"]
    assert main(["gpus", "--cloud", "azure"]) == 0
    out = capsys.readouterr().out
    assert "T4" in out and "H200" not in out and "Saving" in out
