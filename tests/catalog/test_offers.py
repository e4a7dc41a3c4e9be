"""A price catalog (built-in, the chart's, or a live override) refuses prices and sizes that are not
finite numbers, 0 or more, naming the file, line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.catalog.offers import read_offers_csv
from orchestrator.catalog.override import CSV_COLUMNS, current_offers, override_path
from orchestrator.errors import UserError

HEADER = ",".join(CSV_COLUMNS[:-1]) + "\n"
GOOD = "aws,g5.xlarge,A10G,1,24,4,16,1.006,0.45,us-east-1,use1-az1\n"


def row(column: str, value: str) -> str:
    cells = GOOD.strip().split(",")
    cells[CSV_COLUMNS.index(column)] = value
    return ",".join(cells) + "\n"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-98", "NaN", "1e400"])
@pytest.mark.parametrize("column", ["on_demand_usd_per_hour", "spot_usd_per_hour", "vcpus"])
def test_a_price_or_size_that_is_no_finite_amount_is_refused(tmp_path: Path, column: str, value: str) -> None:
    path = tmp_path / "prices.csv"
    path.write_text(HEADER + GOOD + row(column, value))
    with pytest.raises(UserError, match=f"{path}, line 3: {column} is '{value}'") as err:
        read_offers_csv(path, "chart price catalog")
    assert f"To fix: fix {column} on that line" in str(err.value)


def test_empty_and_zero_prices_are_read(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    path.write_text(HEADER + row("spot_usd_per_hour", "") + row("on_demand_usd_per_hour", "0"))
    first, second = read_offers_csv(path, "test")
    assert first.spot_usd_per_hour is None and second.on_demand_usd_per_hour == 0.0


def test_a_bad_gpu_count_or_a_missing_column_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    path.write_text(HEADER + row("accelerator_count", "-1"))
    with pytest.raises(UserError, match="line 2: accelerator_count is '-1'"):
        read_offers_csv(path, "test")
    path.write_text("cloud,instance_type\naws,x\n")
    with pytest.raises(UserError, match="no column accelerator"):
        read_offers_csv(path, "test")


def test_a_live_override_with_a_nan_price_is_refused(tmp_path: Path) -> None:
    path = override_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(",".join(CSV_COLUMNS) + "\n" + row("spot_usd_per_hour", "nan").strip() + ",aws live\n")
    with pytest.raises(UserError, match=f"{path}, line 2: spot_usd_per_hour is 'nan'"):
        current_offers(tmp_path)
