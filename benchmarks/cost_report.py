"""Benchmark: build_report and every output format on generated data (jobs over a year of segments).

    python benchmarks/cost_report.py [--jobs 5000] [--seed 7] [--export FILE]

``--export`` also writes the generated ledger as JSON for ``gpuctl cost report --input FILE``.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from orchestrator.costs.html import to_html
from orchestrator.costs.inputs import ReportInputs, inputs_to_json
from orchestrator.costs.ledger import LostWork
from orchestrator.costs.render import to_csv, to_json, to_table
from orchestrator.costs.report import GroupBy, build_report
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.status import JobStatus

T = TypeVar("T")

GPUS = [
    ("T4", 0.526, 0.16),
    ("V100", 3.06, 0.92),
    ("A10G", 1.006, 0.40),
    ("A100", 32.77, 12.1),
    ("H100", 98.3, 29.5),
]
ZONES = ["use1-az1", "use1-az2", "use1-az4", "use2-az1", "usw2-az2"]


def generate(n_jobs: int, seed: int, end: datetime) -> ReportInputs:
    rng = random.Random(seed)
    start = end - timedelta(days=365)
    jobs: list[JobRecord] = []
    segments: list[SegmentRecord] = []
    idle: dict[str, float] = {}
    lost: dict[str, LostWork] = {}
    seg_id = 0
    for i in range(n_jobs):
        jid = f"job-{i:05d}"
        submitted = start + timedelta(seconds=rng.uniform(0, 360 * 86400))
        gpu, od, spot = rng.choice(GPUS)
        nodes, per_node = rng.choice([1, 1, 2, 4]), rng.choice([1, 4, 8])
        t = submitted
        n_segments = rng.randint(1, 20)
        gpu_hours = 0.0
        for k in range(n_segments):
            length = timedelta(hours=rng.uniform(0.2, 8))
            market = "on-demand" if rng.random() < 0.2 else "spot"
            price = od if market == "on-demand" else spot * rng.uniform(0.8, 1.3)
            seg_id += 1
            ended = t + length if t + length < end else None
            segments.append(
                SegmentRecord(
                    seg_id,
                    jid,
                    k + 1,
                    gpu,
                    f"{gpu.lower()}-node",
                    market,
                    "aws",
                    "us-east-1",
                    rng.choice(ZONES),
                    nodes,
                    per_node,
                    t,
                    ended,
                    price,
                    od,
                    "built-in list prices",
                    "preempted" if ended else None,
                )
            )
            gpu_hours += length.total_seconds() / 3600 * nodes * per_node
            t = t + length + timedelta(minutes=rng.uniform(1, 30))
            if t >= end:
                break
        jobs.append(
            JobRecord(
                jid,
                f"train-{i}",
                f"user{rng.randrange(40)}",
                f"team{rng.randrange(8)}",
                "local",
                JobStatus.SUCCEEDED,
                None,
                "",
                "{}",
                submitted,
                None,
                t,
                n_segments,
                n_segments - 1,
                0,
            )
        )
        if rng.random() < 0.8:
            idle[jid] = gpu_hours * rng.betavariate(2, 5)
        lost[jid] = LostWork(
            steps=rng.randrange(0, 500) * (n_segments - 1), seconds_per_step=rng.uniform(0.1, 2)
        )
    return ReportInputs(jobs, segments, idle, lost)


def timed(fn: Callable[..., T], *args: Any) -> tuple[T, float]:
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--export", type=Path)
    args = parser.parse_args()
    now = datetime(2026, 3, 1, tzinfo=UTC)
    data, gen_s = timed(generate, args.jobs, args.seed, now)
    if args.export:
        args.export.write_text(inputs_to_json(data))
    table = Table(
        title=f"{len(data.jobs)} jobs, {len(data.segments)} segments over 365 days (generation {gen_s:.2f} s)"
    )
    for col in (
        "group by",
        "rows",
        "build_report s",
        "table s",
        "csv s",
        "json s",
        "html s",
        "html KiB",
        "total s",
    ):
        table.add_column(col, justify="left" if col == "group by" else "right")
    for by in GroupBy:
        report, build_s = timed(build_report, data.jobs, data.segments, now, None, by, data.idle, data.lost)
        sink = Console(file=io.StringIO(), width=200)
        _, table_s = timed(sink.print, to_table(report))
        _, csv_s = timed(to_csv, report)
        _, json_s = timed(to_json, report)
        html, html_s = timed(to_html, report)
        total = build_s + table_s + csv_s + json_s + html_s
        times = (build_s, table_s, csv_s, json_s, html_s)
        cells = [f"{x:.3f}" for x in times]
        table.add_row(by.value, str(len(report.rows)), *cells, f"{len(html) / 1024:.0f}", f"{total:.3f}")
    Console(width=140).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
