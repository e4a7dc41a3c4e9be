"""`gpuctl simulate`: replay spot availability traces against the market policies."""

from __future__ import annotations

import argparse
import json
from typing import Any

from orchestrator.cli.simulate_inputs import resolve_inputs
from orchestrator.errors import UserError
from orchestrator.policies.daily import MARKET_LOG_H
from orchestrator.policies.evaluate import evaluate
from orchestrator.policies.traces import load_traces


def register(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="replay spot availability traces against the cost-cutting policies",
        description=(
            "Each start point (random, seeded) runs every policy on the traces; results are means. "
            "Several --trace files are the zones of one market. Costs are compared with running "
            "on-demand only; 'omniscient' is the optimum knowing the whole trace (a lower bound)."
        ),
    )
    p.add_argument("--trace", action="append", required=True, metavar="FILE", help="a zone's trace (repeat)")
    p.add_argument(
        "--job",
        metavar="FILE",
        help="job spec (job.yaml): work, deadline, changeover, nodes and catalog prices from it; "
        "the flags below override it",
    )
    p.add_argument(
        "--compute-hours", type=float, metavar="H", help="work the job needs (default: goals.compute_hours)"
    )
    p.add_argument(
        "--deadline-hours", type=float, metavar="H", help="deadline after the start (default: goals.deadline)"
    )
    p.add_argument(
        "--changeover-hours",
        type=float,
        metavar="H",
        help="paid time without progress per launch (default: market.changeover)",
    )
    p.add_argument(
        "--on-demand-price", type=float, metavar="USD", help="per node-hour (default: the catalog's)"
    )
    p.add_argument("--spot-price", type=float, metavar="USD", help="per node-hour (default: the catalog's)")
    p.add_argument(
        "--policy", action="append", default=[], metavar="NAME", help="a policy name or 'all' (repeat)"
    )
    p.add_argument("--starts", type=int, default=100, help="random start points (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--nodes",
        metavar="MIN:MAX",
        help="elastic job: compare rescale with waiting for all nodes (default: resources.nodes, "
        "on traces with node counts)",
    )
    p.add_argument("--scaling-efficiency", type=float, default=0.9, help="speed kept per doubling of nodes")
    p.add_argument("--rendezvous-hours", type=float, default=0.05, help="pause on each resize")
    p.add_argument(
        "--market-log-hours",
        type=float,
        default=MARKET_LOG_H,
        metavar="HOURS",
        help="hours of the traces before each start the policies are given, as a controller that "
        "watched the market (default 168, as the local and SLURM controllers keep; 0: none, as on "
        "Kubernetes)",
    )
    p.add_argument("--no-omniscient", action="store_true", help="skip the optimum (faster)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.set_defaults(run=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    if args.starts < 1:
        raise UserError("--starts must be at least 1", "give a positive number of start points")
    if not 0.0 <= args.market_log_hours <= 24.0 * 365:
        raise UserError(
            "--market-log-hours must be from 0 to 8760", "give the hours of market history, 0 for none"
        )
    trace = load_traces(args.trace)
    inputs = resolve_inputs(args, trace)
    doc = evaluate(
        trace, inputs.job, args.policy, args.starts, args.seed, with_omniscient=not args.no_omniscient,
        market_log_h=args.market_log_hours,
    )  # fmt: skip
    doc["inputs"] = {**inputs.to_dict(), "market_log_hours": args.market_log_hours}
    if args.output == "json":
        print(json.dumps(doc, indent=2))
        return 0
    print(inputs.describe())
    print(render_table(doc, trace.zones, trace.tick_h))
    return 0


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def render_table(doc: dict[str, Any], zones: tuple[str, ...], tick_h: float) -> str:
    rows = [("policy", "cost USD", "vs on-demand", "deadline met", "spot h", "on-demand h", "preemptions")]
    entries = list(doc["policies"].items())
    if doc.get("omniscient"):
        entries.append(("omniscient (bound)", doc["omniscient"]))
    for name, s in entries:
        label = f"{name} (default)" if name == doc["default_policy"] else name
        rows.append(
            (
                label,
                _fmt(s["cost_usd"], ".2f"),
                _fmt(s["cost_vs_on_demand"], ".3f"),
                _fmt(s["deadline_met_fraction"], ".0%"),
                _fmt(s["spot_hours"], ".1f"),
                _fmt(s["on_demand_hours"], ".1f"),
                _fmt(s["preemptions"], ".1f"),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        f"{len(zones)} zone(s): {', '.join(zones)}; tick {tick_h * 3600:g} s; {doc['starts']} start(s), "
        f"each given {doc['inputs'].get('market_log_hours', 0):g} h of the traces before it; "
        f"on-demand only: {doc['on_demand_only_cost_usd']:.2f} USD"
    ]
    for r in rows:
        cells = (c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        lines.append("  ".join(cells))
    return "\n".join(lines)
