"""`gpuctl gpus` (what is on offer and at what price) and `gpuctl catalog refresh` (live AWS prices)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.catalog.offers import builtin_set_aside
from orchestrator.catalog.override import current_offers
from orchestrator.catalog.quirks import notes
from orchestrator.catalog.refresh import refresh_aws
from orchestrator.catalog.summary import GpuSummary, summarize
from orchestrator.cli.output import add_output_option, print_json, usd
from orchestrator.terminal import terminal_text


def register(sub: Any) -> None:
    gpus = sub.add_parser("gpus", help="GPU types on offer with the cheapest on-demand and spot prices")
    gpus.add_argument("--cloud", choices=["aws", "gcp", "azure"], help="only this cloud")
    gpus.add_argument("--gpu", metavar="NAME", help="one GPU type: one line per instance type")
    add_output_option(gpus)
    gpus.set_defaults(run=run_gpus)

    catalog = sub.add_parser("catalog", help="the price catalog")
    catalog_sub = catalog.add_subparsers(dest="catalog_command", metavar="SUBCOMMAND", required=True)
    refresh = catalog_sub.add_parser("refresh", help="fetch live AWS spot and on-demand prices")
    refresh.add_argument(
        "--region", action="append", help="AWS region (repeatable); default: all in the catalog"
    )
    refresh.add_argument("--gpu", action="append", help="only these GPU types (repeatable)")
    refresh.set_defaults(run=run_refresh)


def _as_dict(s: GpuSummary) -> dict[str, Any]:
    return {
        "gpu": s.gpu_type,
        "gpu_count": s.gpu_count,
        "available_counts": list(s.counts),
        "gpu_memory_gib": s.gpu_memory_gib,
        "instance_type": s.instance_type or None,
        "clouds": list(s.clouds),
        "on_demand_usd_per_hour": s.on_demand_usd,
        "on_demand_where": s.on_demand_where or None,
        "spot_usd_per_hour": s.spot_usd,
        "spot_where": s.spot_where or None,
        "spot_saving": s.saving,
        "per_gpu": s.gpu_count is None,
        "price_source": s.price_source,
    }


def _table(rows: list[GpuSummary], per_gpu: bool) -> Table:
    unit = "USD/GPU-h" if per_gpu else "USD/h"
    table = Table(title="GPUs on offer (cheapest of all regions and zones)")
    first = ["GPU", "GPUs/node", "Memory"] if per_gpu else ["GPU", "Qty", "Memory", "Instance"]
    for name in [*first, "Clouds", f"On-demand {unit}", "Where", f"Spot {unit}", "Where", "Saving"]:
        table.add_column(name, justify="right" if "USD" in name or name in ("Qty", "Saving") else "left")
    for s in rows:
        saving = "-" if s.saving is None else f"{100 * s.saving:.0f}%"
        lead = [s.gpu_type, ",".join(map(str, s.counts)), f"{s.gpu_memory_gib:.4g} GiB"]
        if not per_gpu:
            lead = [s.gpu_type, str(s.gpu_count), f"{s.gpu_memory_gib:.4g} GiB", s.instance_type]
        cells = [*lead, ",".join(s.clouds), usd(s.on_demand_usd), s.on_demand_where, usd(s.spot_usd)]
        table.add_row(*map(Text, [*cells, s.spot_where, saving]))  # Text: a name is never markup
    sources = sorted({p for s in rows for p in s.price_source.split("; ") if p})
    table.caption = Text("prices: " + "; ".join(sources), style="table.caption")
    return table


def run_gpus(args: argparse.Namespace) -> int:
    rows = summarize(current_offers(), gpu=args.gpu, cloud=args.cloud)
    if args.output == "json":
        print_json([_as_dict(s) for s in rows])
    else:
        Console(width=170).print(_table(rows, per_gpu=args.gpu is None))
        for note in notes(builtin_set_aside(), gpu=args.gpu, cloud=args.cloud):
            print(terminal_text(f"note: {note}"))
    return 0


def run_refresh(args: argparse.Namespace) -> int:
    result = refresh_aws(regions=args.region, gpu_types=args.gpu)
    for note in result.notes:
        print(f"note: {note}")
    print(
        f"wrote {len(result.offers)} AWS offers ({result.spot_prices} spot, "
        f"{result.on_demand_prices} on-demand prices, fetched {result.fetched_at.isoformat()}) "
        f"to {result.path}"
    )
    return 0
