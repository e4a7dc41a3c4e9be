"""Benchmark the market policies on the spot traces, in the setting of "Can't Be Late" (NSDI'24).

48 h of work, deadlines 52 h and 70 h, changeover 0.2 h, on-demand 3.06 USD/h, spot 0.918 USD/h.
Zone sets: each zone alone, all 9 zones together, us-east-1a/1c/1d together. Prints each policy's cost
as a fraction of on-demand only, the deadline-met fraction, and the share of the omniscient savings
captured by gpuctl's default policy. Every start point is given the week of the trace before it, as
a controller that logged the market would know it (plan-ahead reads a daily cycle from it).

``--heldout`` prints the leave-one-set-out table instead: every trace set (the shared AWS traces and
the synthetic regimes of orchestrator/policies/synthetic.py) held out in turn, plan-ahead's
constants chosen on the other sets only, over job settings from 1.05x to 2x the work, changeovers of
0.05 to 0.5 h and spot at 0.2 to 0.5 of on-demand (orchestrator/policies/validation.py).

    python benchmarks/spot_policies.py [--traces DIR] [--starts 300] [--seed 0] [--markdown]
    python benchmarks/spot_policies.py --heldout [--starts 200] [--markdown]
    (either with --market-log-hours 0: no week before the starts, as on Kubernetes)
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spot_policies_args import AVAILABILITY, parser, print_header, print_row, summary_line

from orchestrator.policies import synthetic
from orchestrator.policies.evaluate import evaluate, savings_share
from orchestrator.policies.market import DEFAULT_POLICY, POLICIES, market_policy
from orchestrator.policies.planning import PlanAheadPolicy
from orchestrator.policies.simulator import SimJob
from orchestrator.policies.traces import AvailabilityTrace, load_traces
from orchestrator.policies.validation import (
    BASELINES,
    Row,
    evaluate_rows,
    leave_one_set_out,
    summarise,
)

DEADLINES = (52.0, 70.0)


def zone_sets(files: list[Path]) -> list[tuple[str, list[Path]]]:
    by_zone = {f.stem.split("_")[0]: f for f in files}
    sets = [(z, [f]) for z, f in sorted(by_zone.items())]
    sets.append(("all 9 zones" if len(files) == 9 else f"all {len(files)} zones", sorted(files)))
    east = [by_zone[z] for z in ("us-east-1a", "us-east-1c", "us-east-1d") if z in by_zone]
    if len(east) == 3:
        sets.append(("us-east-1a,1c,1d", east))
    return sets


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__.splitlines()[0], "default 300; --heldout: 200")
    ap.add_argument("--heldout", action="store_true", help="the leave-one-set-out table")
    args = ap.parse_args(argv)
    folder = args.traces / AVAILABILITY if (args.traces / AVAILABILITY).is_dir() else args.traces
    files = sorted(folder.glob("*.json"))
    if not files:
        print(f"no traces under {folder}; pass --traces DIR", file=sys.stderr)
        return 2
    if args.heldout:
        return heldout(files, args.starts or 200, args.seed, args.markdown, args.market_log_hours)
    starts = args.starts or 300
    names = list(POLICIES)
    scored = list(dict.fromkeys([DEFAULT_POLICY, PlanAheadPolicy.name]))
    header = ["zones", "deadline h", *names, "omniscient", *(f"{n} share" for n in scored)]
    print_header(header, args.markdown)
    shares: dict[str, list[float]] = {n: [] for n in scored}
    above: dict[str, float] = {n: -1.0 for n in scored}
    misses: dict[str, float] = {}
    began = time.perf_counter()
    for label, paths in zone_sets(files):
        trace = load_traces(paths)
        for deadline in DEADLINES:
            job = SimJob(48.0, deadline, 0.2, 0.918, 3.06)
            doc = evaluate(trace, job, names, starts, args.seed, market_log_h=args.market_log_hours)
            cells = [label, f"{deadline:g}"]
            for n in names:
                s = doc["policies"][n]
                met = s["deadline_met_fraction"]
                if met < 1.0:
                    misses[n] = min(misses.get(n, 1.0), met)
                cells.append(f"{s['cost_vs_on_demand']:.3f}" + ("" if met == 1.0 else f" ({met:.0%} met)"))
            omni = doc["omniscient"]["cost_vs_on_demand"]
            best_baseline = min(doc["policies"][n]["cost_vs_on_demand"] for n in BASELINES)
            cells.append(f"{omni:.3f}")
            for n in scored:
                cost = doc["policies"][n]["cost_vs_on_demand"]
                above[n] = max(above[n], cost - best_baseline)
                share = savings_share(cost, omni)
                if share is not None:
                    shares[n].append(share)
                cells.append("-" if share is None else f"{share:.2f}")
            print_row(cells, args.markdown)
    print()
    print(f"default policy: {DEFAULT_POLICY}")
    for n in scored:
        print(
            f"{n}: mean share of omniscient savings {sum(shares[n]) / len(shares[n]):.3f}; "
            f"most above the best of {', '.join(BASELINES)}: {above[n]:+.3f} of on-demand"
        )
    print(
        "deadline misses (lowest met fraction): "
        + (", ".join(f"{k} {v:.0%}" for k, v in misses.items()) or "none")
    )
    print(f"elapsed: {time.perf_counter() - began:.1f} s for {starts} starts per setting")
    print(f"market log before each start: {args.market_log_hours:g} h")
    return 0


# plan-ahead's constants to choose from: the prior's cycle (an up run and a down run) in hours, and the
# shape of the gamma prior over an outage's own recovery rate (infinite: memoryless outages)
CANDIDATES = {
    "plan-ahead": (3.0, 1.0),
    "plan-ahead 2h": (2.0, 1.0),
    "plan-ahead 4h": (4.0, 1.0),
    "plan-ahead 6h": (6.0, 1.0),
    "plan-ahead memoryless": (3.0, math.inf),
}
AWS_GROUPS = ("us-east-1a", "us-east-1c", "us-east-2b", "us-west-2b", "us-east-1a,1c,1d", "all 9 zones")


def heldout_sets(files: list[Path]) -> dict[str, list[tuple[str, AvailabilityTrace]]]:
    """The shared traces (a few zone groups) and each synthetic regime, fitted to the shared traces."""
    aws = [(label, load_traces(paths)) for label, paths in zone_sets(files) if label in AWS_GROUPS]
    fits = synthetic.fit_trace(load_traces(files))
    sets = {"aws-v100": aws}
    for regime in synthetic.REGIMES:
        sets[regime] = synthetic.trace_set(regime, fits)
    return sets


def heldout(files: list[Path], starts: int, seed: int, markdown: bool, market_log_h: float) -> int:
    began = time.perf_counter()
    policies = {name: market_policy(name) for name in (*BASELINES, "reserve-slack")}
    policies.update(
        {name: PlanAheadPolicy(cycle, outage_shape=shape) for name, (cycle, shape) in CANDIDATES.items()}
    )
    rows = evaluate_rows(heldout_sets(files), policies, starts=starts, seed=seed, market_log_h=market_log_h)
    folds = leave_one_set_out(rows, list(CANDIDATES))
    header = ["held-out set", "zones", "deadline x, changeover h, spot/od", "best baseline", "reserve-slack",
              "plan-ahead (chosen)", "above best ± s.e.", "omniscient", "share"]  # fmt: skip
    print_header(header, markdown)
    scored: list[tuple[Row, str]] = []
    for fold in folds:
        for r in fold.rows:
            scored.append((r, fold.chosen))
            share = r.share(fold.chosen)
            cells = [
                fold.trace_set, r.group, r.setting.label, f"{r.best_baseline():.3f}",
                f"{r.cost['reserve-slack']:.3f}", f"{r.cost[fold.chosen]:.3f}",
                f"{r.regret(fold.chosen):+.3f} ± {r.regret_se.get(fold.chosen, 0.0):.3f}",
                f"{r.omniscient:.3f}", "-" if share is None else f"{share:.2f}",
            ]  # fmt: skip
            print_row(cells, markdown)
    print()
    for fold in folds:
        s = summarise([(r, fold.chosen) for r in fold.rows])
        print(f"{fold.trace_set}: chose {fold.chosen} on the other sets; {summary_line(s)}")
    print(f"held out, all sets: {summary_line(summarise(scored))}")
    for name in ("reserve-slack", *CANDIDATES):
        print(
            f"{name} everywhere (in-sample for plan-ahead's choice): {summary_line(summarise([(r, name) for r in rows]))}"
        )
    print(f"elapsed: {time.perf_counter() - began:.1f} s for {starts} starts per row")
    print(f"market log before each start: {market_log_h:g} h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
