"""What benchmarks/spot_policies.py and spot_policies_real.py share: where the traces are, the
common command-line options, and how a table row and a summary line are printed."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from orchestrator.policies.daily import MARKET_LOG_H
from orchestrator.policies.validation import TOLERANCE, Summary

_REPO = Path(__file__).resolve().parents[1]
# ../shared next to the main checkout; worktrees one level deeper look one more level up
_FOLDERS = [
    _REPO.parent / "shared" / "data" / "spot-traces",
    _REPO.parent.parent / "shared" / "data" / "spot-traces",
]
DEFAULT_TRACES = next((c for c in _FOLDERS if c.is_dir()), _FOLDERS[0])
AVAILABILITY = Path("availability/1-node/aws-02-15-2023")
PREEMPTION = Path("preemption/4-node/aws-08-03-2023")


def parser(description: str, starts_help: str) -> argparse.ArgumentParser:
    """The options both benchmarks take: --traces, --starts (default None: the script's own),
    --seed, --markdown, --market-log-hours."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="the spot-traces folder")
    ap.add_argument("--starts", type=int, default=None, help=f"start points per row ({starts_help})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument(
        "--market-log-hours", type=float, default=MARKET_LOG_H,
        help=f"hours of the trace before each start given to the policies (default {MARKET_LOG_H:g}; 0: none)",
    )  # fmt: skip
    return ap


def print_row(cells: Sequence[str], markdown: bool) -> None:
    """One table row, tab-separated or as markdown."""
    print("| " + " | ".join(cells) + " |" if markdown else "\t".join(cells), flush=True)


def print_header(cells: Sequence[str], markdown: bool) -> None:
    print_row(cells, markdown)
    if markdown:
        print("|" + "---|" * len(cells))


def summary_line(s: Summary) -> str:
    return (
        f"{s.rows} rows, {s.above_tolerance} more than {TOLERANCE} above the best baseline "
        f"({s.clearly_above} by more than two s.e.; worst {s.worst_regret:+.3f}), "
        f"mean share of omniscient savings {s.mean_share:.2f}, deadlines met {s.min_met:.0%} (lowest row)"
    )
