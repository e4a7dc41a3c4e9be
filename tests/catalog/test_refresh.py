"""`gpuctl catalog refresh` against moto's EC2 server on loopback, plus stubbed answers for prices.

moto's spot price history is a fixed 0.00001 USD placeholder for every zone and it has no Pricing
API, so paging and real-looking prices use botocore's Stubber.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from orchestrator.catalog.offers import find_offers
from orchestrator.catalog.override import current_offers, override_path
from orchestrator.catalog.refresh import refresh_aws, spot_prices, zone_ids
from orchestrator.cli.main import main
from orchestrator.errors import TemporaryError, UserError

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture()
def aws_env(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path / "home"))
    return moto_url


def product(instance_type: str, usd: str) -> str:
    return json.dumps(
        {
            "product": {"attributes": {"instanceType": instance_type, "regionCode": "us-east-1"}},
            "terms": {
                "OnDemand": {"T1": {"priceDimensions": {"D1": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}
            },
        }
    )


def stubbed_pricing(pages: list[list[str]]) -> tuple[Any, Stubber]:
    client = boto3.client("pricing", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")
    stub = Stubber(client)
    for i, items in enumerate(pages):
        expected = {"ServiceCode": "AmazonEC2", "Filters": ANY, "FormatVersion": "aws_v1"}
        if i:
            expected["NextToken"] = f"page{i}"
        answer: dict[str, Any] = {"PriceList": items, "FormatVersion": "aws_v1"}
        if i + 1 < len(pages):
            answer["NextToken"] = f"page{i + 1}"
        stub.add_response("get_products", answer, expected)
    stub.activate()
    return client, stub


def test_refresh_through_moto_maps_zone_names_to_ids(aws_env: str, tmp_path: Path) -> None:
    pricing, stub = stubbed_pricing(
        [[product("g5.xlarge", "1.10"), product("m5.large", "0.096")], [product("g5.2xlarge", "1.30")]]
    )

    def clients(service: str, region: str) -> Any:
        return pricing if service == "pricing" else boto3.client(service, region_name=region)

    home = tmp_path / "home"
    result = refresh_aws(home=home, regions=["us-east-1"], gpu_types=["A10G"], clients=clients, now=NOW)
    stub.assert_no_pending_responses()
    ids = zone_ids(boto3.client("ec2", region_name="us-east-1"))
    assert result.path == override_path(home) and result.path.is_file()
    live = [o for o in result.offers if o.spot_usd_per_hour == pytest.approx(0.00001)]
    assert live and {o.zone for o in live} <= set(ids.values())  # AZ IDs, as in the built-in CSV
    assert all(o.zone.startswith("use1-az") for o in result.offers)
    g5 = {o.zone: o for o in live if o.instance_type == "g5.xlarge"}
    assert g5[ids["us-east-1d"]].on_demand_usd_per_hour == pytest.approx(1.10)
    assert g5[ids["us-east-1d"]].price_source == "aws live 2026-03-02T12:00:00Z"
    assert result.on_demand_prices == 2  # m5.large is not a catalog GPU type

    merged = find_offers("A10G", offers=current_offers(home), zones=[ids["us-east-1d"]])
    chosen = next(o for o in merged if o.instance_type == "g5.xlarge")
    assert chosen.price_source.startswith("aws live") and chosen.spot_usd_per_hour == pytest.approx(0.00001)
    assert any(o.price_source == "built-in list prices" for o in current_offers(home) if o.cloud == "gcp")


def test_moto_spot_filters_by_instance_type(aws_env: str) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    prices = spot_prices(ec2, ["g5.xlarge"], NOW)
    assert prices and {t for t, _ in prices} == {"g5.xlarge"}
    assert {z for _, z in prices} <= set(zone_ids(ec2))


def test_spot_paging_keeps_newest_linux_price() -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")
    stub = Stubber(ec2)

    def row(zone: str, price: str, hour: int, product: str = "Linux/UNIX") -> dict[str, Any]:
        stamp = datetime(2026, 3, 2, hour, tzinfo=UTC)
        return {"AvailabilityZone": zone, "InstanceType": "p3.2xlarge", "ProductDescription": product,
                "SpotPrice": price, "Timestamp": stamp}  # fmt: skip

    base = {"InstanceTypes": ["p3.2xlarge"], "ProductDescriptions": ["Linux/UNIX"], "StartTime": NOW}
    stub.add_response(
        "describe_spot_price_history",
        {
            "SpotPriceHistory": [row("us-east-1a", "0.91", 9), row("us-east-1b", "1.20", 11)],
            "NextToken": "n1",
        },
        {**base, "MaxResults": 1000},
    )
    stub.add_response(
        "describe_spot_price_history",
        {"SpotPriceHistory": [row("us-east-1a", "0.95", 10), row("us-east-1a", "9.99", 12, "Windows")]},
        {**base, "MaxResults": 1000, "NextToken": "n1"},
    )
    with stub:
        prices = spot_prices(ec2, ["p3.2xlarge"], NOW)
    assert prices == {("p3.2xlarge", "us-east-1a"): 0.95, ("p3.2xlarge", "us-east-1b"): 1.20}


def test_no_credentials_is_a_clear_user_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path / "home"))
    with pytest.raises(UserError, match="no AWS credentials") as err:
        refresh_aws(regions=["us-east-1"], gpu_types=["V100"])
    assert "aws configure" in str(err.value) and "built-in catalog stays in use" in str(err.value)
    assert not override_path(tmp_path / "home").exists()
    assert main(["catalog", "refresh", "--region", "us-east-1"]) == 2
    assert "To fix" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("code", "kind"), [("UnauthorizedOperation", UserError), ("RequestLimitExceeded", TemporaryError)]
)
def test_aws_errors_are_mapped(code: str, kind: type[Exception], tmp_path: Path) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
                       aws_access_key_id="x", aws_secret_access_key="x")  # fmt: skip
    stub = Stubber(ec2)
    stub.add_client_error("describe_availability_zones", service_error_code=code, http_status_code=400)
    stub.activate()
    with pytest.raises(kind, match=code):
        refresh_aws(home=tmp_path, regions=["us-east-1"], gpu_types=["V100"], clients=lambda s, r: ec2)
    assert not override_path(tmp_path).exists()


def test_damaged_override_says_how_to_fix(tmp_path: Path) -> None:
    path = override_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("cloud,instance_type\naws,p3.2xlarge\n")
    with pytest.raises(UserError, match="damaged"):
        current_offers(tmp_path)
