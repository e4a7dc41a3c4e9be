"""What the dashboard shows, as JSON-ready data, built with the functions the CLI uses.

- a job: its status document, exactly ``gpuctl status JOB -o json`` (the CLI's own builder), plus what
  only the job page shows (events, progress and GPU-utilization points, the tail of its logs);
- jobs: the documents of ``gpuctl list -o json``;
- costs: ``gpuctl cost report --by BY -o json`` (the same inputs and :func:`build_report`), plus the
  report's time series and each budget's burn this month.

Every store is opened read-only: the dashboard never writes the job store.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.cli import jobs_cmd
from orchestrator.cli.cost_cmd import load_report_inputs
from orchestrator.contract import read_progress_records
from orchestrator.costs.budgets import load_cost_config, month_window
from orchestrator.costs.ledger import Window
from orchestrator.costs.render import to_json
from orchestrator.costs.report import GroupBy, Series, build_report_from
from orchestrator.dashboard.budget_burn import budget_burns
from orchestrator.dashboard.logs import LogTail, tail_file
from orchestrator.dashboard.views import bucket_text
from orchestrator.errors import GpuctlError
from orchestrator.state.job_dir import JobDir, job_dir_path
from orchestrator.state.row_check import DamagedRow
from orchestrator.state.store import JobStore
from orchestrator.state.usage import UsageStore

PROGRESS_TAIL_BYTES = 4 * 2**20
"""Bytes of a progress file read for the progress chart (its newest records)."""
MAX_POINTS = 1000
"""Points per chart: longer series are thinned evenly (the newest point kept)."""


def open_store(home: Path) -> JobStore:
    return JobStore(home, read_only=True)


def job_documents(store: JobStore) -> list[dict[str, Any]]:
    """``gpuctl list -o json``: every job's status document (a damaged job is left out)."""
    docs = []
    for job in store.list_jobs():
        try:
            docs.append(jobs_cmd.job_document(store, job.id))
        except DamagedRow:
            continue
    return docs


def job_document(store: JobStore, job_id: str) -> dict[str, Any]:
    """``gpuctl status JOB -o json``, by the CLI's own function."""
    return jobs_cmd.job_status(store, store.job(job_id).id)


def _thin(points: list[list[float]]) -> list[list[float]]:
    if len(points) <= MAX_POINTS:
        return points
    every = len(points) / (MAX_POINTS - 1)
    return [points[int(i * every)] for i in range(MAX_POINTS - 1)] + [points[-1]]


def progress_points(job_dir: Path) -> list[list[float]]:
    """[time (epoch seconds), step, steps per second since the previous point or None] of the job's
    step records, oldest first."""
    records = read_progress_records(JobDir(job_dir).progress, tail_bytes=PROGRESS_TAIL_BYTES)
    steps = [
        [r.time.timestamp(), float(r.step)]
        for r in records
        if r.is_step and r.time is not None and r.step is not None
    ]
    thinned = _thin(steps)
    out: list[list[Any]] = []
    for i, (t, step) in enumerate(thinned):
        rate = None
        if i > 0:
            dt, ds = t - thinned[i - 1][0], step - thinned[i - 1][1]
            rate = round(ds / dt, 6) if dt > 0 and ds >= 0 else None
        out.append([t, step, rate])
    return out


def gpu_points(store: JobStore, job_id: str) -> list[list[float]]:
    """[window end (epoch seconds), mean utilization %, p95 utilization %] over the job's stored
    monitor windows; windows of several nodes that end in the same second are averaged per GPU."""
    by_end: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for window in UsageStore(store).windows(job_id):
        by_end[round(float(window["end"]))].append(window)
    points = []
    for end in sorted(by_end):
        group = by_end[end]
        gpus = sum(int(w["gpus"]) for w in group) or 1
        mean = sum(float(w["util_mean_pct"]) * int(w["gpus"]) for w in group) / gpus
        p95 = max(float(w["util_p95_pct"]) for w in group)
        points.append([float(end), round(mean, 3), round(p95, 3)])
    return _thin(points)


def log_tails(store: JobStore, job_id: str, backend: str) -> list[LogTail]:
    """The tail of each of the job's output files (`gpuctl logs --tail`); a backend that cannot be
    asked (SLURM without its cluster config) is one note."""
    try:
        paths = jobs_cmd.make_backend(backend, store).log_paths(job_id)
    except GpuctlError as err:
        return [LogTail("logs", [], err.message)]
    return [tail_file(p) for p in paths]


def events(store: JobStore, job_id: str) -> list[dict[str, str]]:
    """``gpuctl events JOB -o json``."""
    return [{"time": e.time.isoformat(timespec="seconds"), "kind": e.kind, "message": e.message}
            for e in store.events(job_id)]  # fmt: skip


def job_detail(store: JobStore, job_id: str) -> dict[str, Any]:
    """Everything the job page shows; ``status`` is ``gpuctl status JOB -o json``."""
    doc = job_document(store, job_id)
    job_dir = job_dir_path(store.home, doc["id"])
    return {
        "status": doc,
        "events": events(store, doc["id"]),
        "progress": progress_points(job_dir),
        "gpu": gpu_points(store, doc["id"]),
        "logs": [t.as_json() for t in log_tails(store, doc["id"], doc["backend"])],
    }


def series_json(series: Series) -> dict[str, Any]:
    return {
        "bucket_seconds": series.bucket.total_seconds(),
        "bucket": bucket_text(series.bucket.total_seconds()),
        "starts": [s.timestamp() for s in series.starts],
        "cost_by_group": {k: [round(v, 6) for v in values] for k, values in series.cost_by_group.items()},
        "savings": [round(v, 6) for v in series.savings],
    }


def costs_document(
    home: Path, by: GroupBy, window: Window | None, now: datetime | None = None
) -> dict[str, Any]:
    """``report``: ``gpuctl cost report --by BY -o json`` (the same inputs and :func:`build_report_from`);
    ``series``: its cost and savings over time; ``budgets``: each budget's burn this month."""
    now = now or datetime.now(UTC)
    inputs = load_report_inputs(home, window.start if window else None)
    report = build_report_from(inputs, now, window, by)
    month = month_window(now).start
    burns = budget_burns(load_cost_config(home / "config.yaml"), inputs.jobs,
                         open_store(home).segments(since=month), inputs.to_finish, now)  # fmt: skip
    return {
        "report": json.loads(to_json(report)),
        "series": series_json(report.series),
        "budgets": [b.as_json() for b in burns],
    }
