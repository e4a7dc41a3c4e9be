"""Live AWS prices: spot from EC2's spot price history, on-demand from the AWS Pricing API.

The built-in AWS catalog names zones by AZ ID (``use1-az4``), which is the same physical zone in
every account; ``describe_spot_price_history`` answers with zone names (``us-east-1a``), which each
account maps to IDs differently. :func:`zone_ids` reads this account's mapping from
``describe_availability_zones`` so the live prices land on the right catalog rows.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.catalog.offers import Offer, builtin_offers
from orchestrator.catalog.override import override_path, write_override
from orchestrator.errors import TemporaryError, UserError
from orchestrator.times import iso_z

LINUX = "Linux/UNIX"
PRICING_REGION = "us-east-1"
"""The Pricing API answers from us-east-1 (and a few others) for every region."""

ClientFactory = Callable[[str, str], Any]
"""``(service, region) -> boto3 client``."""


def default_client_factory(service: str, region: str) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10, read_timeout=30)
    return boto3.session.Session().client(service, region_name=region, config=config)


@dataclass
class RefreshResult:
    path: Path
    fetched_at: datetime
    offers: list[Offer]
    spot_prices: int = 0
    on_demand_prices: int = 0
    notes: list[str] = field(default_factory=list)


def zone_ids(ec2: Any) -> dict[str, str]:
    """This account's zone names mapped to AZ IDs, e.g. ``{"us-east-1a": "use1-az6"}``."""
    answer = ec2.describe_availability_zones(AllAvailabilityZones=False)
    return {z["ZoneName"]: z["ZoneId"] for z in answer["AvailabilityZones"] if "ZoneId" in z}


def spot_prices(ec2: Any, instance_types: list[str], now: datetime) -> dict[tuple[str, str], float]:
    """The newest Linux spot price per (instance type, zone name), following every page."""
    paginator = ec2.get_paginator("describe_spot_price_history")
    newest: dict[tuple[str, str], tuple[datetime, float]] = {}
    pages = paginator.paginate(
        InstanceTypes=instance_types,
        ProductDescriptions=[LINUX],
        StartTime=now,
        PaginationConfig={"PageSize": 1000},
    )
    for page in pages:
        for row in page.get("SpotPriceHistory", []):
            if not str(row.get("ProductDescription", "")).startswith(LINUX):
                continue
            key = (row["InstanceType"], row["AvailabilityZone"])
            stamp = row.get("Timestamp") or now
            if key not in newest or stamp > newest[key][0]:
                newest[key] = (stamp, float(row["SpotPrice"]))
    return {k: v[1] for k, v in newest.items()}


def _on_demand_usd(product_json: str) -> tuple[str, float] | None:
    product = json.loads(product_json)
    instance_type = product.get("product", {}).get("attributes", {}).get("instanceType")
    for term in product.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            usd = dim.get("pricePerUnit", {}).get("USD")
            if instance_type and usd is not None and float(usd) > 0:
                return instance_type, float(usd)
    return None


def on_demand_prices(pricing: Any, region: str, instance_types: Iterable[str]) -> dict[str, float]:
    """Linux, shared-tenancy, no-license on-demand prices per instance type in ``region``."""
    wanted = set(instance_types)
    out: dict[str, float] = {}
    paginator = pricing.get_paginator("get_products")
    filters = [
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
        {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
        {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
        {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
        {"Type": "TERM_MATCH", "Field": "licenseModel", "Value": "No License required"},
    ]
    for page in paginator.paginate(ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1"):
        for item in page.get("PriceList", []):
            parsed = _on_demand_usd(item if isinstance(item, str) else json.dumps(item))
            if parsed and parsed[0] in wanted:
                out[parsed[0]] = parsed[1]
    return out


def _map_aws_error(exc: Exception) -> Exception:
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    keep = "the built-in catalog stays in use"
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return UserError(
            f"no AWS credentials found ({exc}); {keep}",
            "run `aws configure`, set AWS_PROFILE, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        )
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        if code in {"UnauthorizedOperation", "AuthFailure", "AccessDenied", "AccessDeniedException"}:
            return UserError(
                f"AWS refused the price query ({code}); {keep}",
                "allow ec2:DescribeSpotPriceHistory, ec2:DescribeAvailabilityZones and pricing:GetProducts",
            )
        return TemporaryError(f"AWS price query failed ({code}: {exc}); {keep}", "try again in a few minutes")
    if isinstance(exc, EndpointConnectionError | BotoCoreError):
        return TemporaryError(f"cannot reach AWS ({exc}); {keep}", "check the network and try again")
    return exc


def refresh_aws(
    home: Path | None = None,
    regions: Iterable[str] | None = None,
    gpu_types: Iterable[str] | None = None,
    clients: ClientFactory = default_client_factory,
    now: datetime | None = None,
) -> RefreshResult:
    """Fetch live AWS prices for catalog instance types and write the override file.

    Raises :class:`UserError` (credentials, permissions) or :class:`TemporaryError` (network,
    throttling); the override file is left as it was then.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    moment = (now or datetime.now(UTC)).replace(microsecond=0)
    source = f"aws live {iso_z(moment)}"
    wanted_gpus = {g.lower() for g in gpu_types} if gpu_types else None
    base = [
        o
        for o in builtin_offers()
        if o.cloud == "aws" and (wanted_gpus is None or o.gpu_type.lower() in wanted_gpus)
    ]
    region_list = sorted(set(regions) if regions else {o.region for o in base})
    result = RefreshResult(path=override_path(home), fetched_at=moment, offers=[])
    try:
        pricing = clients("pricing", PRICING_REGION)
        for region in region_list:
            templates = {o.instance_type: o for o in base if o.region == region}
            if not templates:
                result.notes.append(f"{region}: no GPU instance types of the catalog there; skipped")
                continue
            types = sorted(templates)
            ec2 = clients("ec2", region)
            ids = zone_ids(ec2)
            spots = spot_prices(ec2, types, moment)
            try:
                demand = on_demand_prices(pricing, region, types)
            except ClientError as exc:
                demand = {}
                result.notes.append(f"{region}: on-demand prices unavailable ({exc}); built-in ones kept")
            unmapped = sorted({zone for _, zone in spots if zone not in ids})
            if unmapped:
                result.notes.append(f"{region}: zones without an AZ ID {unmapped}; named by zone name")
            result.spot_prices += len(spots)
            result.on_demand_prices += len(demand)
            for (itype, zone_name), price in sorted(spots.items()):
                t = templates[itype]
                result.offers.append(
                    dataclasses.replace(
                        t,
                        zone=ids.get(zone_name, zone_name),
                        spot_usd_per_hour=price,
                        on_demand_usd_per_hour=demand.get(itype, t.on_demand_usd_per_hour),
                        price_source=source if itype in demand else f"{source} (spot; built-in on-demand)",
                    )
                )
            live_zones = {(o.instance_type, o.zone) for o in result.offers if o.region == region}
            for o in base:
                if (
                    o.region == region
                    and o.instance_type in demand
                    and (o.instance_type, o.zone) not in live_zones
                ):
                    result.offers.append(
                        dataclasses.replace(
                            o,
                            on_demand_usd_per_hour=demand[o.instance_type],
                            price_source=f"{source} (on-demand; built-in spot)",
                        )
                    )
    except (ClientError, BotoCoreError) as exc:
        raise _map_aws_error(exc) from exc
    write_override(result.path, result.offers)
    return result
