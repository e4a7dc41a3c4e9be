"""Benchmark: the ledger and the controller on SQLite and on PostgreSQL; prints a markdown table.

    python benchmarks/ledger_scale.py [--jobs 2000] [--segments 100000] [--running 1000] [--repeats 3]
        [--round-only | --reports-only]

1. A ledger of ``--segments`` closed segments over ``--jobs`` finished jobs (60 days, five GPU types,
   forty users, eight teams) is written to a SQLite home through the store, then moved to a fresh
   database on a throwaway PostgreSQL server (``gpuctl db move``'s code, counts and totals checked).
   ``gpuctl cost report``'s work is timed in process on each engine, as the CLI runs it (the garbage
   collector paused): reading the ledger (``load_report_inputs``) and building the report, and that
   plus rendering each format (table, CSV, JSON, HTML); wall and CPU seconds, the median of
   ``--repeats`` runs, in a fresh process per engine (as the CLI runs; not in this one, whose heap
   building the ledger left full of freed objects). The home's ``config.yaml`` gives six of the
   eight teams a monthly budget and the other two a shared one, so the HTML report (the only format
   that reads budgets, as in the CLI) draws seven budget burns.
2. ``--running`` jobs of one node each run on the testing kit's simulated backend, driven by one
   controller per engine until every job is RUNNING; then one controller round (``tick_all``: load,
   observe, decide, persist every job) is timed, the median of ``--repeats`` rounds.

Needs Debian's ``postgresql`` server binaries (orchestrator/testing/postgres.py).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GPUS = [("T4", 0.526, 0.16), ("V100", 3.06, 0.92), ("A10G", 1.006, 0.40), ("A100", 32.77, 12.1),
        ("H100", 98.3, 29.5)]  # fmt: skip
FORMATS = ("table", "csv", "json", "html")


def median_s(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


# -- the ledger ------------------------------------------------------------------------------------


def build_ledger(home: Path, n_jobs: int, n_segments: int, now: datetime, seed: int = 7) -> None:
    """Finished jobs through the store; their segments in one insert per job batch."""
    import sqlalchemy as sa

    from orchestrator.state.status import JobStatus
    from orchestrator.state.store import JobStore
    from orchestrator.state.tables import jobs, segments

    rng = random.Random(seed)
    store = JobStore(home, url=f"sqlite:///{home / 'gpuctl.db'}")
    per_job = max(1, n_segments // n_jobs)
    rows: list[dict[str, Any]] = []
    ids = []
    for i in range(n_jobs):
        start = now - timedelta(days=rng.uniform(0.5, 60))
        job = store.create_job(name=f"train-{i}", user=f"user{i % 40}", team=f"team{i % 8}",
                               backend="local", spec_json="{}", deadline=None, now=start)  # fmt: skip
        ids.append(job.id)
        gpu, on_demand, spot = rng.choice(GPUS)
        t = start
        for k in range(per_job):
            end = min(t + timedelta(minutes=rng.uniform(5, 60)), now)
            market, price = ("spot", spot) if rng.random() < 0.8 else ("on-demand", on_demand)
            rows.append({
                "job_id": job.id, "attempt": k + 1, "gpu_type": gpu, "instance_type": f"{gpu.lower()}-node",
                "market": market, "cloud": "aws", "region": "us-east-1", "zone": "use1-az1", "nodes": 1,
                "gpus_per_node": rng.choice([1, 4, 8]), "started_at": t.isoformat(), "ended_at": end.isoformat(),
                "node_price_usd_per_hour": price, "on_demand_node_price_usd_per_hour": on_demand,
                "price_source": "built-in list prices", "end_reason": "preempted",
            })  # fmt: skip
            t = end + timedelta(minutes=1)
    with store.engine.begin() as conn:
        conn.execute(segments.insert(), rows)
        conn.execute(sa.update(jobs).where(jobs.c.id.in_(ids)).values(status=str(JobStatus.SUCCEEDED)))
    teams = ", ".join(f"team{i}: 20000" for i in range(6))  # team6 and team7 share the other budget
    (home / "config.yaml").write_text(f"budgets:\n  teams: {{{teams}}}\n  other_teams_monthly_usd: 30000\n")


def time_reports(home: Path, url: str, repeats: int, now: datetime) -> dict[str, tuple[float, float]]:
    """Seconds (median; wall and this process's CPU) to read the ledger and build the report, and that
    plus rendering each format, run as ``gpuctl cost report`` runs them (the garbage collector paused)."""
    from rich.console import Console

    from orchestrator.cli.cost_cmd import load_report_inputs
    from orchestrator.costs.budgets import load_cost_config
    from orchestrator.costs.bulk import collector_paused
    from orchestrator.costs.html import to_html
    from orchestrator.costs.render import TABLE_ROWS, to_csv, to_json, to_table
    from orchestrator.costs.report import build_report_from

    os.environ["GPUCTL_DATABASE_URL"] = url

    def table(report: Any) -> str:
        console = Console(file=io.StringIO(), width=160, record=True)
        console.print(to_table(report, TABLE_ROWS))  # the CLI's default --limit
        return console.export_text()

    renders: dict[str, Callable[[Any], str]] = {
        "table": table,
        "csv": to_csv,
        "json": to_json,
        "html": to_html,
    }

    def report(render: Callable[[Any], str] | None) -> None:
        with collector_paused():
            budgets = load_cost_config(home / "config.yaml") if render is to_html else None  # as the CLI
            built = build_report_from(load_report_inputs(home), now, None, "job", budgets)
            if render is not None:
                render(built)

    found = {"read + build": wall_and_cpu(partial(report, None), repeats)}
    for name in FORMATS:
        found[name] = wall_and_cpu(partial(report, renders[name]), repeats)
    return found


def wall_and_cpu(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """The median wall and CPU seconds of ``repeats`` runs of ``fn``."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


# -- the controller --------------------------------------------------------------------------------


def time_round(home: Path, url: str, n_running: int, repeats: int) -> tuple[float, float, int]:
    """Seconds (median) of one controller round over ``n_running`` RUNNING jobs, wall and this
    process's CPU (the round's own work; the database server's is not in it); the jobs running."""
    from orchestrator.controller.loop import Controller
    from orchestrator.spec import load_spec_text
    from orchestrator.state.status import JobStatus
    from orchestrator.state.store import JobStore
    from orchestrator.testing import FakeClock, SimScript, SimulatedBackend

    home.mkdir(parents=True, exist_ok=True)
    store = JobStore(home, url=url)
    world = SimulatedBackend(FakeClock(datetime.now(UTC)))  # the world's time is the controller's
    spec = load_spec_text("name: bench\ncommand: train.py\nresources: {nodes: 1}\n").model_dump_json()
    now = datetime.now(UTC)
    for i in range(n_running):
        job = store.create_job(name=f"bench-{i}", user=f"user{i % 40}", team=f"team{i % 8}", backend=world.name,
                               spec_json=spec, deadline=None, now=now)  # fmt: skip
        world.script(job.id, SimScript(steps=10**9))
    controller = Controller(store, world)

    def one_round() -> None:
        world.clock.advance(max(0.0, (datetime.now(UTC) - world.clock.now()).total_seconds()))
        world.advance()
        controller.tick_all()

    for _ in range(10):  # PENDING -> PLACING -> LAUNCHING -> RUNNING
        one_round()
        if all(j.status is JobStatus.RUNNING for j in store.list_jobs()):
            break
    running = sum(1 for j in store.list_jobs() if j.status is JobStatus.RUNNING)
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        one_round()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), running


# -- main ------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="finished jobs in the ledger")
    parser.add_argument("--segments", type=int, default=100_000, help="segments in the ledger")
    parser.add_argument("--running", type=int, default=1000, help="running jobs in the controller round")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement (the median is shown)")
    parser.add_argument("--round-only", action="store_true", help="only the controller round (no ledger)")
    parser.add_argument(
        "--reports-only", action="store_true", help="only the cost reports (no controller round)"
    )
    parser.add_argument("--time-reports-of", nargs=3, metavar=("HOME", "URL", "NOW"),
                        help="(run by this script) time the reports of a built ledger; print JSON")  # fmt: skip
    args = parser.parse_args()
    if args.time_reports_of:
        home, url, at = args.time_reports_of
        print(json.dumps(time_reports(Path(home), url, args.repeats, datetime.fromisoformat(at))))
        return

    from orchestrator.testing.postgres import PostgresServer

    now = datetime.now(UTC)
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp, PostgresServer() as server:
        if not args.round_only:
            rows += _reports(Path(tmp) / "ledger", server, args, now)
        os.environ.pop("GPUCTL_DATABASE_URL", None)
        if not args.reports_only:
            rows += _rounds(Path(tmp), server, args)

    print("| measurement | SQLite | PostgreSQL | PG/SQLite |")
    print("|---|---:|---:|---:|")
    for label, lite, pg in rows:
        ms = label.strip().startswith("per")
        print(f"| {label} | {_shown(lite, ms)} | {_shown(pg, ms)} | {pg / lite:.2f} |")


def _rounds(tmp: Path, server: Any, args: argparse.Namespace) -> list[tuple[str, float, float]]:
    """One controller round over the running jobs, timed on each engine."""
    rows: list[tuple[str, float, float]] = []
    lite_round, lite_cpu, lite_running = time_round(tmp / "ctl-sqlite", f"sqlite:///{tmp / 'ctl.db'}", args.running,
                                                    args.repeats)  # fmt: skip
    pg_round, pg_cpu, pg_running = time_round(
        tmp / "ctl-pg", server.new_database(), args.running, args.repeats
    )
    rows.append((f"controller round ({lite_running}/{pg_running} running jobs)", lite_round, pg_round))
    rows.append(("  per job-tick", lite_round / max(1, lite_running), pg_round / max(1, pg_running)))
    rows.append(("  per job-tick, CPU of gpuctl's process", lite_cpu / max(1, lite_running),
                 pg_cpu / max(1, pg_running)))  # fmt: skip
    print(f"load average (1, 5, 15 min) after the rounds: {os.getloadavg()}", file=sys.stderr)
    return rows


def _reports(
    home: Path, server: Any, args: argparse.Namespace, now: datetime
) -> list[tuple[str, float, float]]:
    """The ledger built on SQLite, moved to PostgreSQL, and each report timed on both."""
    from orchestrator.state.database import upgrade_schema
    from orchestrator.state.db_move import move_store

    rows: list[tuple[str, float, float]] = []
    started = time.perf_counter()
    build_ledger(home, args.jobs, args.segments, now)
    pg_url = server.new_database()
    move_store(home / "gpuctl.db", pg_url, now, upgrade_schema, pg_url)
    print(f"built and moved the ledger in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    sqlite_url = f"sqlite:///{home / 'gpuctl.db'}"
    on_sqlite = _reports_in_a_new_process(home, sqlite_url, args.repeats, now)
    on_pg = _reports_in_a_new_process(home, pg_url, args.repeats, now)
    print(f"load average (1, 5, 15 min) after the reports: {os.getloadavg()}", file=sys.stderr)
    for name in on_sqlite:
        label = "read ledger + build report" if name == "read + build" else f"cost report -o {name}"
        label = f"{label} ({args.segments:,} segments, {args.jobs:,} jobs)"
        rows.append((label, on_sqlite[name][0], on_pg[name][0]))
        rows.append(("  CPU of gpuctl's process", on_sqlite[name][1], on_pg[name][1]))
    return rows


def _reports_in_a_new_process(home: Path, url: str, repeats: int, now: datetime) -> dict[str, list[float]]:
    """:func:`time_reports` run by a fresh Python process."""
    command = [sys.executable, __file__, "--repeats", str(repeats), "--time-reports-of", str(home), url,
               now.isoformat()]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"timing the reports on {url.split(':')[0]} failed:\n{done.stderr}")
    return cast(dict[str, list[float]], json.loads(done.stdout))


def _shown(seconds: float, ms: bool) -> str:
    return f"{seconds * 1000:.2f} ms" if ms else f"{seconds:.3f} s"


if __name__ == "__main__":
    main()
