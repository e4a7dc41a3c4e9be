"""Benchmark: `gpuctl cost report` on a job store, with every job diagnosed and its fixes priced.

    python benchmarks/cost_report_store.py [--jobs 2000] [--segments 100000] [--steps 50]

Builds a job store in a temporary GPUCTL_HOME (jobs over the last 60 days, their segments, and a
progress file of ``--steps`` step records per job with data and compute times), then times the
report the CLI builds (`load_report_inputs` + `build_report` + each format) over the whole store and
over `--since 3d` (a subset of the jobs), and the diagnosis alone.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GPUS = [("T4", 0.526, 0.16), ("V100", 3.06, 0.92), ("A10G", 1.006, 0.40), ("A100", 32.77, 12.1),
        ("H100", 98.3, 29.5)]  # fmt: skip


def build_store(home: Path, n_jobs: int, n_segments: int, n_steps: int, seed: int, now: datetime) -> None:
    from sqlalchemy import insert, update

    from orchestrator.state.status import JobStatus
    from orchestrator.state.store import JobStore
    from orchestrator.state.tables import jobs, segments

    rng = random.Random(seed)
    store = JobStore(home)
    per_job = max(1, n_segments // n_jobs)
    for i in range(n_jobs):
        start = now - timedelta(days=rng.uniform(0.5, 60))
        job = store.create_job(name=f"train-{i}", user=f"user{i % 40}", team=f"team{i % 8}",
                               backend="local", spec_json="{}", deadline=None, now=start)  # fmt: skip
        gpu, on_demand, spot = rng.choice(GPUS)
        rows, t = [], start
        for k in range(per_job):
            end = min(t + timedelta(minutes=rng.uniform(5, 60)), now)
            rows.append((job.id, k + 1, gpu, f"{gpu.lower()}-node", "spot", "aws", "us-east-1", "use1-az1", 1,
                         rng.choice([1, 4, 8]), t.isoformat(), end.isoformat(), spot, on_demand,
                         "built-in list prices", "preempted"))  # fmt: skip
            t = end + timedelta(minutes=1)
        with store.transaction() as conn:
            names = ("job_id", "attempt", "gpu_type", "instance_type", "market", "cloud", "region", "zone",
                     "nodes", "gpus_per_node", "started_at", "ended_at", "node_price_usd_per_hour",
                     "on_demand_node_price_usd_per_hour", "price_source", "end_reason")  # fmt: skip
            conn.execute(insert(segments), [dict(zip(names, row, strict=True)) for row in rows])
            conn.execute(update(jobs).where(jobs.c.id == job.id).values(status=str(JobStatus.SUCCEEDED)))
        wait = rng.uniform(0.0, 0.6)
        lines = [json.dumps({"step": s, "total_steps": n_steps, "time": (start + timedelta(seconds=s)).isoformat(),
                             "data_s": wait, "compute_s": 1.0 - wait}) for s in range(1, n_steps + 1)]  # fmt: skip
        (store.job_dir(job.id) / "progress.jsonl").write_text("\n".join(lines) + "\n")


def timed(what: str, fn: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    out = fn()
    print(f"{what:<44} {time.perf_counter() - started:8.3f} s")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--segments", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ["GPUCTL_HOME"] = str(home)
        timed(f"build store ({args.jobs} jobs, {args.segments} segments)",
              lambda: build_store(home, args.jobs, args.segments, args.steps, args.seed, now))  # fmt: skip
        from orchestrator.cli.avoidable_view import stored_fixes
        from orchestrator.cli.cost_cmd import load_report_inputs
        from orchestrator.costs.html import to_html
        from orchestrator.costs.render import to_csv, to_json
        from orchestrator.costs.report import build_report_from
        from orchestrator.state.store import JobStore

        store = JobStore(home, read_only=True)
        found = timed("diagnose every job (stored_fixes)", lambda: stored_fixes(store, now))
        print(f"  {sum(1 for f in found.fixes.values() if f.known)} jobs measured")
        for label, since in (("whole store", None), ("--since 3d", now - timedelta(days=3))):
            inputs = timed(f"load_report_inputs, {label}", partial(load_report_inputs, home, since))
            report = timed(f"build_report, {label}", partial(build_report_from, inputs, now, None, "job"))
            for name, fmt in (("csv", to_csv), ("json", to_json), ("html", to_html)):
                timed(f"  {name}", partial(fmt, report))
            print(f"  {len(report.rows)} rows, {len(report.top_fixes)} top fixes")


if __name__ == "__main__":
    main()
