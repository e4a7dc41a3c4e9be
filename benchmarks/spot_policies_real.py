"""Leave-one-real-trace-out validation of the market policies on every real trace in shared/data.

Rows: each of the 9 AWS V100 availability zones alone, the zone groups (us-east-1, us-east-2,
us-west-2, all 9), each of the 3 preemption traces alone (spot up while at least one of its 4 nodes
runs) and the 3 together; each under the job settings of orchestrator/policies/validation.py
(deadlines 1.05x to 2x of 48 h of work, changeovers 0.05 to 0.5 h, spot at 0.2 to 0.5 of on-demand).
Every policy runs on the same start points of a row, each given the week of the trace before it.

plan-ahead's candidates (its constants) are chosen, for each row, on the rows that share no trace
file with it (orchestrator/policies/validation.py ``leave_traces_out``): a zone's own data never
chooses what is scored on it. Each row: the chosen candidate's cost minus the best of greedy,
uniform progress and eager failover, with the standard error of that paired difference (per start
point), the share of the omniscient savings, and the deadline-met fraction.

    nice -n 10 python benchmarks/spot_policies_real.py [--starts 100] [--seed 0] [--markdown]
        [--candidates plan-ahead,...] [--market-log-hours 168]
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spot_policies_args import AVAILABILITY, PREEMPTION, parser, print_header, print_row, summary_line

from orchestrator.policies.market import market_policy
from orchestrator.policies.planning import PlanAheadPolicy
from orchestrator.policies.traces import AvailabilityTrace, load_traces
from orchestrator.policies.validation import BASELINES, Row, evaluate_rows, leave_traces_out, summarise

AVAILABILITY_GROUPS = {
    "us-east-1 (1a,1c,1d,1f)": ("us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f"),
    "us-east-2 (2a,2b)": ("us-east-2a", "us-east-2b"),
    "us-west-2 (2a,2b,2c)": ("us-west-2a", "us-west-2b", "us-west-2c"),
}

# the candidates plan-ahead's constants are chosen from, per row, on the rows sharing no trace with it
CANDIDATES: dict[str, PlanAheadPolicy] = {
    # the default: a corridor of 0.25 of the slack, unbounded where the zones' ended runs are
    # consistent with the plan's model (orchestrator/policies/guard.py ``trusted``)
    "plan-ahead": PlanAheadPolicy(),
    "lag 0.5": PlanAheadPolicy(lag_share=0.5),
    "lag 1": PlanAheadPolicy(lag_share=1.0),
}
# scored beside them on the same start points, never chosen: plan-ahead without the corridor, and
# with the corridor at 0.25 of the slack whatever the runs
BEFORE = "unbounded"
FIXED = "fixed corridor"


def real_sets(root: Path) -> tuple[dict[str, list[tuple[str, AvailabilityTrace]]], dict[str, frozenset[str]]]:
    """The rows' trace groups by set, and each group's trace files (set/zone names)."""
    avail = sorted((root / AVAILABILITY).glob("*.json"))
    preempt = sorted((root / PREEMPTION).glob("*.json"))
    files: dict[str, frozenset[str]] = {}
    sets: dict[str, list[tuple[str, AvailabilityTrace]]] = {"availability": [], "preemption": []}

    def add(set_name: str, label: str, paths: list[Path]) -> None:
        sets[set_name].append((label, load_traces(paths)))
        files[label] = frozenset(f"{set_name}/{p.stem}" for p in paths)

    by_zone = {p.stem.split("_")[0]: p for p in avail}
    for zone, path in sorted(by_zone.items()):
        add("availability", zone, [path])
    for label, zones in AVAILABILITY_GROUPS.items():
        if all(z in by_zone for z in zones):
            add("availability", label, [by_zone[z] for z in zones])
    if len(avail) > 1:
        add("availability", f"all {len(avail)} zones", avail)
    for path in preempt:
        add("preemption", f"{path.stem.split('_')[0]} (preemption)", [path])
    if len(preempt) > 1:
        add("preemption", f"all {len(preempt)} (preemption)", preempt)
    return sets, files


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__.splitlines()[0], "default 100")
    ap.add_argument(
        "--candidates", default=",".join(CANDIDATES), help="plan-ahead candidates, comma-separated"
    )
    args = ap.parse_args(argv)
    starts = args.starts or 100
    sets, files = real_sets(args.traces)
    if not any(sets.values()):
        print(f"no traces under {args.traces}; pass --traces DIR", file=sys.stderr)
        return 2
    names = [n for n in args.candidates.split(",") if n]
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        print(f"unknown candidates {unknown}; choose from {list(CANDIDATES)}", file=sys.stderr)
        return 2
    began = time.perf_counter()
    policies = {name: market_policy(name) for name in BASELINES}
    policies.update({name: CANDIDATES[name] for name in names})
    policies[BEFORE] = PlanAheadPolicy(lag_share=math.inf)
    policies[FIXED] = PlanAheadPolicy(trusted_lag_share=0.25)
    rows = evaluate_rows(sets, policies, starts=starts, seed=args.seed, market_log_h=args.market_log_hours)
    scored = leave_traces_out(rows, names, files)
    _print_rows(scored, args.markdown)
    print()
    for set_name in sets:
        part = [(r, c) for r, c in scored if r.trace_set == set_name]
        if part:
            print(f"{set_name}, held out: {summary_line(summarise(part))}")
    print(f"all real rows, held out: {summary_line(summarise(scored))}")
    for name in (*names, BEFORE, FIXED):
        print(f"{name} everywhere (in-sample): {summary_line(summarise([(r, name) for r in rows]))}")
    print(f"elapsed: {time.perf_counter() - began:.1f} s for {starts} starts per row")
    return 0


def _print_rows(scored: list[tuple[Row, str]], markdown: bool) -> None:
    header = ["set", "zones", "deadline x, changeover h, spot/od", "best baseline", "chosen", "cost",
              "above best ± s.e.", "omniscient", "share", "met", f"{BEFORE}: above best ± s.e.",
              f"{BEFORE}: share"]  # fmt: skip
    print_header(header, markdown)
    for r, chosen in scored:
        share = r.share(chosen)
        cells = [
            r.trace_set, r.group, r.setting.label, f"{r.best_baseline():.3f}", chosen, f"{r.cost[chosen]:.3f}",
            f"{r.regret(chosen):+.3f} ± {r.regret_se.get(chosen, 0.0):.3f}", f"{r.omniscient:.3f}",
            "-" if share is None else f"{share:.2f}", f"{r.met[chosen]:.0%}",
            f"{r.regret(BEFORE):+.3f} ± {r.regret_se.get(BEFORE, 0.0):.3f}", _share(r, BEFORE),
        ]  # fmt: skip
        print_row(cells, markdown)


def _share(r: Row, name: str) -> str:
    share = r.share(name)
    return "-" if share is None else f"{share:.2f}"


if __name__ == "__main__":
    sys.exit(main())
