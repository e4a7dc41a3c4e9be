"""What `gpuctl simulate` simulates: the job's numbers from its flags, else from a job file and the catalog.

``--job job.yaml`` gives the work (``goals.compute_hours``), the deadline (``goals.deadline``, hours from
now), the changeover (``market.changeover``) and the prices: the catalog's spot price of the first
candidate zone (the spec's ``market.zones`` order, else the cheapest) and its best on-demand price, for
the spec's GPU types and GPUs per node, as the controller takes them. Every flag overrides its field.

Nodes: a 1-node trace only says whether a zone has spot, so the job's nodes (``max``) are priced as one
unit; a trace with node counts runs the spec's nodes (``min:max`` compares rescaling with waiting).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.backends.base import Placement
from orchestrator.controller.market_choice import changeover_hours
from orchestrator.controller.placement import Candidates, candidates_for
from orchestrator.errors import UserError
from orchestrator.policies.simulator import SimJob
from orchestrator.policies.traces import AvailabilityTrace
from orchestrator.spec import JobSpec, load_spec_file, parse_deadline


@dataclass(frozen=True)
class SimInputs:
    job: SimJob
    priced_nodes: int
    """Nodes in one simulated node: the job's node count on a 1-node trace, else 1."""
    sources: dict[str, str]
    """Where each number came from: a flag, a job file field, or a catalog offer."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "compute_hours": self.job.work_h,
            "deadline_hours": self.job.deadline_h,
            "changeover_hours": self.job.changeover_h,
            "spot_price_usd_per_hour": self.job.spot_price,
            "on_demand_price_usd_per_hour": self.job.on_demand_price,
            "min_nodes": self.job.min_nodes,
            "max_nodes": self.job.max_nodes,
            "priced_nodes": self.priced_nodes,
            "sources": self.sources,
        }

    def describe(self) -> str:
        """Two lines: where the numbers came from, for the table's header."""
        j, s = self.job, self.sources
        unit = f"{self.priced_nodes} nodes as one" if self.priced_nodes > 1 else "per node"
        return (
            f"work {j.work_h:g} h ({s['compute_hours']}), deadline {j.deadline_h:.4g} h ({s['deadline_hours']}), "
            f"changeover {j.changeover_h:g} h ({s['changeover_hours']})\n"
            f"USD/h, {unit}: spot {j.spot_price:.4g} ({s['spot_price']}), "
            f"on-demand {j.on_demand_price:.4g} ({s['on_demand_price']})"
        )


def parse_nodes(text: str) -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in text.split(":"))
    except ValueError:
        raise UserError(f"bad --nodes '{text}'", "write MIN:MAX, e.g. --nodes 2:4") from None
    return lo, hi


def resolve_inputs(
    args: argparse.Namespace, trace: AvailabilityTrace, now: datetime | None = None
) -> SimInputs:
    job_file: str | None = args.job
    spec = load_spec_file(job_file) if job_file else None
    sources: dict[str, str] = {}

    def pick(key: str, flag: str, field: str, from_spec: float | None) -> float:
        value: float | None = getattr(args, key)
        if value is not None:
            sources[key] = flag
            return value
        if from_spec is not None:
            sources[key] = field
            return from_spec
        if job_file is None:
            raise UserError(f"{flag} is missing", f"give {flag}, or --job job.yaml with {field}")
        raise UserError(f"job file {job_file} has no {field}", f"add {field} to it, or give {flag}")

    goals = spec.goals if spec else None
    clock = now or datetime.now(UTC)
    deadline_h = None
    if goals and goals.deadline:
        deadline_h = (parse_deadline(goals.deadline, clock) - clock).total_seconds() / 3600
    work = pick(
        "compute_hours", "--compute-hours", "goals.compute_hours", goals.compute_hours if goals else None
    )
    deadline_h = pick("deadline_hours", "--deadline-hours", "goals.deadline", deadline_h)
    change_h = pick(
        "changeover_hours",
        "--changeover-hours",
        "market.changeover",
        changeover_hours(spec) if spec else None,
    )
    prices = _prices(args, spec, sources)
    lo, hi, unit = _nodes(args.nodes, spec, trace)
    job = SimJob(
        work_h=work,
        deadline_h=deadline_h,
        changeover_h=change_h,
        spot_price=prices["spot_price"] * unit,
        on_demand_price=prices["on_demand_price"] * unit,
        min_nodes=lo,
        max_nodes=hi,
        scaling_efficiency=args.scaling_efficiency,
        rendezvous_h=args.rendezvous_hours,
    )
    return SimInputs(job, unit, sources)


def _prices(args: argparse.Namespace, spec: JobSpec | None, sources: dict[str, str]) -> dict[str, float]:
    """Per node-hour: the flags, else the controller's prices for the spec (first candidate spot zone,
    best on-demand offer)."""
    flags = {"spot_price": "--spot-price", "on_demand_price": "--on-demand-price"}
    given = {key: getattr(args, key) for key in flags}
    offers: dict[str, Placement | None] = {}
    if spec is not None and None in given.values():
        found: Candidates = candidates_for(spec, None)
        offers = {
            "spot_price": next(iter(found.spot_by_zone.values()), None),
            "on_demand_price": found.on_demand,
        }
    prices: dict[str, float] = {}
    for key, flag in flags.items():
        value, offer = given[key], offers.get(key)
        if value is not None:
            prices[key], sources[key] = value, flag
        elif offer is not None:
            prices[key], sources[key] = offer.node_price_usd_per_hour, f"catalog: {_where(offer)}"
        elif spec is None:
            raise UserError(
                f"{flag} is missing", f"give {flag} (per node-hour), or --job job.yaml to price it"
            )
        else:
            market = key.removesuffix("_price").replace("_", "-")
            raise UserError(
                f"the catalog has no {market} offer of {', '.join(spec.resources.gpu_types)} "
                f"for job file {args.job}",
                f"give {flag}, or allow more zones, regions or GPU types in the job file",
            )
    return prices


def _where(p: Placement) -> str:
    return f"{p.gpus_per_node} x {p.gpu_type}, {p.cloud} {p.zone or p.region} {p.instance_type}, {p.price_source}"


def _nodes(text: str | None, spec: JobSpec | None, trace: AvailabilityTrace) -> tuple[int, int, int]:
    """(min nodes, max nodes, job nodes per simulated node)."""
    if text is not None:
        lo, hi = parse_nodes(text)
    elif spec is None or trace.max_count <= 1:
        return 1, 1, spec.resources.max_nodes if spec else 1
    else:
        lo, hi = spec.resources.min_nodes, spec.resources.max_nodes
    if trace.max_count < lo:
        raise UserError(
            f"the traces never offer {lo} nodes (at most {trace.max_count})",
            "use a multi-node trace or a smaller MIN (--nodes MIN:MAX)",
        )
    return lo, hi, 1
