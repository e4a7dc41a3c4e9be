"""`gpuctl simulate`: replay spot availability traces against the market policies."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from orchestrator.cli.output import print_json
from orchestrator.cli.simulate_inputs import check_complete, resolve_inputs
from orchestrator.errors import UserError
from orchestrator.policies.daily import MARKET_LOG_H
from orchestrator.policies.evaluate import evaluate
from orchestrator.policies.traces import load_traces
from orchestrator.spec import load_spec_file
from orchestrator.terminal import terminal_text

PROGRESS_AFTER_S = 1.5
"""A simulation that runs longer than this shows its progress on standard error."""


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
    p.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="FILE",
        help="a zone's trace, named after its zone: ZONE_....json (repeat; at least one)",
    )
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
    p.add_argument("--seed", type=int, default=0, help="seed of the random start points (default 0)")
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
    p.add_argument(
        "-o", "--output", choices=("table", "json"), default="table", help="output format (default table)"
    )
    p.set_defaults(run=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    if args.starts < 1:
        raise UserError("--starts must be at least 1", "give a positive number of start points")
    if not 0.0 <= args.market_log_hours <= 24.0 * 365:
        raise UserError(
            "--market-log-hours must be from 0 to 8760", "give the hours of market history, 0 for none"
        )
    spec = load_spec_file(args.job) if args.job else None
    trace = load_traces(args.trace) if args.trace else None  # a bad trace file: an error of its own
    check_complete(args, spec)  # every missing input at once
    assert trace is not None  # check_complete refuses no --trace
    inputs = resolve_inputs(args, trace, spec=spec)
    for note in inputs.notes:
        print(terminal_text(f"gpuctl: note: {note}"), file=sys.stderr)
    with SimulationProgress(Console(stderr=True)) as progress:
        doc = evaluate(
            trace, inputs.job, args.policy, args.starts, args.seed, with_omniscient=not args.no_omniscient,
            market_log_h=args.market_log_hours, progress=progress,
        )  # fmt: skip
    doc["inputs"] = {**inputs.to_dict(), "market_log_hours": args.market_log_hours}
    if args.output == "json":
        print_json(doc)
        return 0
    print(terminal_text(inputs.describe(), multiline=True))
    print(render_table(doc, trace.zones, trace.tick_h))
    return 0


class SimulationProgress:
    """Progress of the runs on standard error, once they have taken :data:`PROGRESS_AFTER_S`: a bar
    (cleared at the end) on a terminal, else one line per run. Called as :data:`evaluate`'s
    ``progress``; standard output stays the result's alone."""

    def __init__(self, console: Console, after_s: float | None = None) -> None:
        self._console = console
        self._after_s = PROGRESS_AFTER_S if after_s is None else after_s
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._now: tuple[str, int, int] | None = None
        """The last run told of: (what, runs done, runs in all)."""
        self._shown = False
        self._closed = False
        self._bar: Progress | None = None
        self._timer = threading.Timer(self._after_s, self._show)
        self._timer.daemon = True

    def __enter__(self) -> SimulationProgress:
        if self._after_s <= 0:
            self._show()
        else:
            self._timer.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._timer.cancel()
        with self._lock:
            self._closed = True
            if self._bar is not None:
                self._bar.stop()

    def __call__(self, what: str, done: int, total: int) -> None:
        with self._lock:
            self._now = (what, done, total)
            if self._shown and not self._closed:
                self._report()

    def _show(self) -> None:
        with self._lock:
            if self._closed or self._shown:
                return
            self._shown = True
            if self._console.is_terminal:
                self._bar = Progress(
                    SpinnerColumn(), TextColumn("simulating: {task.description}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), console=self._console, transient=True,
                )  # fmt: skip
                self._bar.add_task("starting", total=self._now[2] if self._now else None)
                self._bar.start()
            self._report()

    def _report(self) -> None:
        if self._now is None:
            return
        what, done, total = self._now
        if self._bar is not None:
            self._bar.update(self._bar.task_ids[0], description=what, completed=done, total=total)
            return
        elapsed = time.monotonic() - self._started
        line = f"gpuctl simulate: {done} of {total} runs done, {elapsed:.1f} s" + (
            f"; running {what}" if done < total else ""
        )
        print(line, file=sys.stderr, flush=True)


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
