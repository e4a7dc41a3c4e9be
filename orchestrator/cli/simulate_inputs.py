"""What `gpuctl simulate` simulates: the job's numbers from its flags, else from a job file and the catalog.

``--job job.yaml`` gives the work (``goals.compute_hours``), the deadline (``goals.deadline``, hours from
now), the changeover (``market.changeover``) and the prices per node-hour of the spec's GPU types and
GPUs per node in the traces' zones (a trace is named after its zone: ``us-east-1c_v100_1.json``): each
zone's own catalog row, else its region's, with a note saying so (see
:mod:`orchestrator.catalog.zone_prices`); never another zone's. Zones priced differently are simulated
at their mean (the simulator has one price per market), with a note. Every flag overrides its field.
Whatever is missing is named at once, all of it, with a command line that would run
(:func:`check_complete`).

Nodes: a 1-node trace only says whether a zone has spot, so the job's nodes (``max``) are priced as one
unit; a trace with node counts runs the spec's nodes (``min:max`` compares rescaling with waiting).
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.catalog.offers import MarketKind
from orchestrator.catalog.zone_prices import ZonePrice, zone_price
from orchestrator.controller.market_choice import changeover_hours
from orchestrator.errors import UserError
from orchestrator.policies.simulator import SimJob
from orchestrator.policies.traces import AvailabilityTrace
from orchestrator.spec import GpuChoice, JobSpec, load_spec_file

SHARED_TRACES = Path("shared") / "data" / "spot-traces" / "availability" / "1-node" / "aws-02-15-2023"
"""The shared AWS traces (next to a gpuctl checkout): what the example command line points at."""


@dataclass(frozen=True)
class SimInputs:
    job: SimJob
    priced_nodes: int
    """Nodes in one simulated node: the job's node count on a 1-node trace, else 1."""
    sources: dict[str, str]
    """Where each number came from: a flag, a job file field, or a catalog offer."""
    notes: tuple[str, ...] = ()
    """What the user should know about the prices (a zone priced from its region)."""

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
            "notes": list(self.notes),
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


# --- what is missing, all at once --------------------------------------------------------------


@dataclass(frozen=True)
class _Number:
    key: str
    """The argparse destination, and the key in ``sources``."""
    flag: str
    field: str | None
    """The job file's field that gives it; ``None``: the catalog does, for the traces' zones."""
    example: float
    meaning: str


_NUMBERS = (
    _Number("compute_hours", "--compute-hours", "goals.compute_hours", 48, "the work the job needs"),
    _Number("deadline_hours", "--deadline-hours", "goals.deadline", 52, "its deadline after the start"),
    _Number("changeover_hours", "--changeover-hours", "market.changeover", 0.2, "paid time per launch"),
    _Number("spot_price", "--spot-price", None, 0.918, "USD per node-hour on spot"),
    _Number("on_demand_price", "--on-demand-price", None, 3.06, "USD per node-hour on-demand"),
)
"""The job's numbers; the examples are the setting of the shared AWS traces' paper."""


def _deadline_hours(spec: JobSpec, now: datetime) -> float | None:
    if not spec.goals.deadline:
        return None
    return (spec.goals.deadline.resolve(now) - now).total_seconds() / 3600


def _from_spec(key: str, spec: JobSpec | None, now: datetime) -> float | None:
    if spec is None:
        return None
    if key == "compute_hours":
        return spec.goals.compute_hours
    if key == "deadline_hours":
        return _deadline_hours(spec, now)
    if key == "changeover_hours":
        return changeover_hours(spec)
    return None


def check_complete(args: argparse.Namespace, spec: JobSpec | None, now: datetime | None = None) -> None:
    """Raise one :class:`UserError` naming every input neither a flag nor the job file gives (prices
    come from the catalog with ``--job``), with a command line that gives them all."""
    clock = now or datetime.now(UTC)
    missing = [] if args.trace else ["--trace FILE: a zone's spot availability trace (repeat for more zones)"]
    absent = [
        n
        for n in _NUMBERS
        if getattr(args, n.key) is None
        and _from_spec(n.key, spec, clock) is None
        and (spec is None or n.field is not None)
    ]
    missing += [f"{n.flag} {_metavar(n)}: {n.meaning}, or {_instead(n, spec, args.job)}" for n in absent]
    if not missing:
        return
    lines = "\n".join(f"  - {m}" for m in missing)
    raise UserError(
        f"gpuctl simulate needs {len(missing)} more input(s):\n{lines}",
        f"give them all, e.g.\n    {example_command(args, spec, absent, clock)}",
    )


def _instead(number: _Number, spec: JobSpec | None, job_file: str | None) -> str:
    if spec is not None:
        return f"{number.field} in job file {job_file}"
    return "--job job.yaml to " + (
        "take it from the job file" if number.field else "price it from the catalog"
    )


def _metavar(number: _Number) -> str:
    return "USD" if number.field is None else "H"


def example_command(
    args: argparse.Namespace, spec: JobSpec | None, absent: Sequence[_Number], now: datetime
) -> str:
    """``gpuctl simulate`` with what the user gave and an example of each missing input."""
    words = ["gpuctl", "simulate"]
    if args.job:
        words += ["--job", args.job]
    for trace in args.trace or [example_trace()]:
        words += ["--trace", trace]
    work = args.compute_hours or _from_spec("compute_hours", spec, now) or 48.0
    for number in _NUMBERS:
        given = getattr(args, number.key)
        if given is not None:
            words += [number.flag, f"{given:g}"]
        elif number in absent:
            value = (
                max(number.example, math.ceil(work * 1.08))
                if number.key == "deadline_hours"
                else number.example
            )
            words += [number.flag, f"{value:g}"]
    return shlex.join(words)


def example_trace() -> str:
    """A trace file that exists: a shared AWS trace when gpuctl runs from a checkout beside
    ``shared/`` (relative to the working folder), else a name to replace."""
    checkout = Path(__file__).resolve().parents[2]
    for base in (Path.cwd().parent, checkout.parent, checkout.parent.parent):
        folder = base / SHARED_TRACES
        found = sorted(folder.glob("*.json")) if folder.is_dir() else []
        if found:
            return os.path.relpath(found[0])
    return "ZONE_v100_1.json"


# --- the inputs --------------------------------------------------------------------------------


def resolve_inputs(
    args: argparse.Namespace,
    trace: AvailabilityTrace,
    now: datetime | None = None,
    spec: JobSpec | None = None,
) -> SimInputs:
    """The simulated job; ``spec`` is the ``--job`` file's (read here when not given)."""
    if spec is None and args.job:
        spec = load_spec_file(args.job)
    clock = now or datetime.now(UTC)
    check_complete(args, spec, clock)
    sources: dict[str, str] = {}
    numbers: dict[str, float] = {}
    for number in _NUMBERS[:3]:
        given = getattr(args, number.key)
        numbers[number.key] = given if given is not None else _from_spec(number.key, spec, clock) or 0.0
        sources[number.key] = number.flag if given is not None else str(number.field)
    prices = _Prices(args, spec, trace.zones)
    lo, hi, unit = _nodes(args.nodes, spec, trace)
    job = SimJob(
        work_h=numbers["compute_hours"],
        deadline_h=numbers["deadline_hours"],
        changeover_h=numbers["changeover_hours"],
        spot_price=prices.price(MarketKind.SPOT, sources) * unit,
        on_demand_price=prices.price(MarketKind.ON_DEMAND, sources) * unit,
        min_nodes=lo,
        max_nodes=hi,
        scaling_efficiency=args.scaling_efficiency,
        rendezvous_h=args.rendezvous_hours,
    )
    return SimInputs(job, unit, sources, tuple(prices.notes))


_FLAGS = {
    MarketKind.SPOT: ("spot_price", "--spot-price"),
    MarketKind.ON_DEMAND: ("on_demand_price", "--on-demand-price"),
}


@dataclass
class _Prices:
    """Per node-hour: the flags, else the catalog's price of the spec's GPU types in the traces' zones."""

    args: argparse.Namespace
    spec: JobSpec | None
    zones: tuple[str, ...]
    notes: list[str] = field(default_factory=list)

    def price(self, market: MarketKind, sources: dict[str, str]) -> float:
        key, flag = _FLAGS[market]
        given: float | None = getattr(self.args, key)
        if given is not None or self.spec is None:  # check_complete: a flag without a job file
            sources[key] = flag
            return float(given or 0.0)
        found = [self._zone(zone, market, flag) for zone in self.zones]
        prices = [p.node_usd_per_hour for p in found]
        self.notes.extend(
            note for note in dict.fromkeys(p.note for p in found) if note and note not in self.notes
        )
        if len(set(prices)) > 1:
            each = ", ".join(f"{p.zone} {p.node_usd_per_hour:.4g}" for p in found)
            self.notes.append(
                f"{market} prices differ between the traces' zones ({each} USD per node-hour): simulated at their "
                f"mean, as the simulator has one {market} price (give {flag} to choose one)"
            )
        sources[key] = "catalog: " + "; ".join(dict.fromkeys(p.source for p in found))
        return statistics.fmean(prices)

    def _zone(self, zone: str, market: MarketKind, flag: str) -> ZonePrice:
        """The spec's GPU type for ``zone``: the first with a price (``gpu_choice: ordered``) or the
        cheapest; the zone's trace name without the suffix ``#N`` of a repeated name."""
        spec = self.spec
        assert spec is not None
        name = zone.split("#", 1)[0]
        found = [
            p
            for t in spec.resources.gpu_types
            if (p := zone_price(t, name, market, spec.resources.gpus_per_node, cloud=spec.market.cloud))
        ]
        if spec.resources.gpu_choice is GpuChoice.CHEAPEST:
            found.sort(key=lambda p: p.node_usd_per_hour)
        if not found:
            raise UserError(
                f"the catalog has no {market} offer of {', '.join(spec.resources.gpu_types)} in zone "
                f"'{name}' or its region (job file {self.args.job})",
                f"give {flag}, or name each trace file after the zone it was recorded in "
                "(e.g. us-east-1c_v100_1.json; see `gpuctl gpus` for the catalog's zones)",
            )
        return found[0]


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
