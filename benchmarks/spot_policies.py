"""Benchmark the market policies on the spot traces, in the setting of "Can't Be Late" (NSDI'24).

48 h of work, deadlines 52 h and 70 h, changeover 0.2 h, on-demand 3.06 USD/h, spot 0.918 USD/h.
Zone sets: each zone alone, all 9 zones together, us-east-1a/1c/1d together. Prints each policy's cost
as a fraction of on-demand only, the deadline-met fraction, and the share of the omniscient savings
captured by gpuctl's default policy.

    python benchmarks/spot_policies.py [--traces DIR] [--starts 300] [--seed 0] [--markdown]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.policies.evaluate import evaluate, savings_share
from orchestrator.policies.market import DEFAULT_POLICY, POLICIES
from orchestrator.policies.simulator import SimJob
from orchestrator.policies.traces import load_traces

_REPO = Path(__file__).resolve().parents[1]
# ../shared next to the main checkout; worktrees one level deeper look one more level up
_CANDIDATES = [
    _REPO.parent / "shared" / "data" / "spot-traces",
    _REPO.parent.parent / "shared" / "data" / "spot-traces",
]
DEFAULT_TRACES = next((c for c in _CANDIDATES if c.is_dir()), _CANDIDATES[0])
SUBDIR = Path("availability/1-node/aws-02-15-2023")
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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="the spot-traces folder")
    ap.add_argument("--starts", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = ap.parse_args(argv)
    folder = args.traces / SUBDIR if (args.traces / SUBDIR).is_dir() else args.traces
    files = sorted(folder.glob("*.json"))
    if not files:
        print(f"no traces under {folder}; pass --traces DIR", file=sys.stderr)
        return 2
    names = list(POLICIES)
    header = ["zones", "deadline h", *names, "omniscient", "default share"]
    print("| " + " | ".join(header) + " |" if args.markdown else "\t".join(header))
    if args.markdown:
        print("|" + "---|" * len(header))
    shares: list[float] = []
    misses: dict[str, float] = {}
    began = time.perf_counter()
    for label, paths in zone_sets(files):
        trace = load_traces(paths)
        for deadline in DEADLINES:
            job = SimJob(48.0, deadline, 0.2, 0.918, 3.06)
            doc = evaluate(trace, job, names, args.starts, args.seed)
            cells = [label, f"{deadline:g}"]
            for n in names:
                s = doc["policies"][n]
                met = s["deadline_met_fraction"]
                if met < 1.0:
                    misses[n] = min(misses.get(n, 1.0), met)
                cells.append(f"{s['cost_vs_on_demand']:.3f}" + ("" if met == 1.0 else f" ({met:.0%} met)"))
            omni = doc["omniscient"]["cost_vs_on_demand"]
            share = savings_share(doc["policies"][DEFAULT_POLICY]["cost_vs_on_demand"], omni)
            if share is not None:
                shares.append(share)
            cells += [f"{omni:.3f}", "-" if share is None else f"{share:.2f}"]
            print("| " + " | ".join(cells) + " |" if args.markdown else "\t".join(cells), flush=True)
    print()
    print(
        f"default policy: {DEFAULT_POLICY}; mean share of omniscient savings: {sum(shares) / len(shares):.3f}"
    )
    print(
        "deadline misses (lowest met fraction): "
        + (", ".join(f"{k} {v:.0%}" for k, v in misses.items()) or "none")
    )
    print(f"elapsed: {time.perf_counter() - began:.1f} s for {args.starts} starts per setting")
    return 0


if __name__ == "__main__":
    sys.exit(main())
