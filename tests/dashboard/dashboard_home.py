"""A GPUCTL_HOME for the dashboard's tests, made with the job store: ended jobs (whose numbers no
longer move, so the dashboard's JSON can equal the CLI's exactly), one of them named by a hostile
team and user, with progress, monitor windows and a log that holds markup."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore, StoreWrites
from orchestrator.state.usage import UsageStore
from tests.cli.hostile_home import PLACEMENT, WINDOW, write_lines

HOSTILE = "<img src=x onerror=alert(1)>"
HOSTILE_USER = '"><script>alert(2)</script>'
HOSTILE_LOG = "<script>alert(3)</script> & done"
START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
ON_DEMAND = {**PLACEMENT, "market": "on_demand", "node_price_usd_per_hour": 3.0, "zone": "use1-az2"}


def _run(store: JobStore, job_id: str, t: datetime) -> None:
    with store.transaction() as conn:
        for target in (JobStatus.PLACING, JobStatus.LAUNCHING, JobStatus.RUNNING):
            store.transition(conn, job_id, target, t, f"{str(target).lower()} (policy: spot has capacity)")


def finished_job(store: JobStore) -> str:
    """Attempt 1 on spot, preempted after an hour; attempt 2 on on-demand, succeeded."""
    job_id = store.create_job(name="trainer", user="ana", team="ml", backend="local", spec_json="{}",
                              deadline=None, now=START).id  # fmt: skip
    _run(store, job_id, START)
    with store.transaction() as conn:
        StoreWrites.open_segment(conn, job_id, 1, PLACEMENT, 2, START)
    later = START + timedelta(hours=1)
    with store.transaction() as conn:
        StoreWrites.close_segment(conn, job_id, "preempted", later)
        store.transition(conn, job_id, JobStatus.PREEMPTED, later, "spot capacity reclaimed")
        store.transition(conn, job_id, JobStatus.RECOVERING, later, "resuming from step 40")
        store.transition(conn, job_id, JobStatus.LAUNCHING, later, "on-demand: no spot in any zone")
        store.transition(conn, job_id, JobStatus.RUNNING, later, "running")
        StoreWrites.open_segment(conn, job_id, 2, ON_DEMAND, 1, later)
    end = later + timedelta(minutes=30)
    with store.transaction() as conn:
        StoreWrites.close_segment(conn, job_id, "finished", end)
        store.transition(conn, job_id, JobStatus.SUCCEEDED, end, "training finished")
    job_dir = store.job_dir(job_id)
    steps = [
        {"time": (START + timedelta(minutes=i)).isoformat(), "step": i, "total_steps": 100} for i in range(50)
    ]
    write_lines(job_dir / "progress.jsonl", [json.dumps(s) for s in steps])
    write_lines(job_dir / "monitor-summary-node-0.jsonl", [json.dumps({**WINDOW, "job_id": job_id})])
    UsageStore(store).ingest(job_id)
    return job_id


def hostile_job(store: JobStore) -> str:
    """A job whose team, user, message and log hold markup; preempted, then failed."""
    job_id = store.create_job(name="hostile", user=HOSTILE_USER, team=HOSTILE, backend="local",
                              spec_json="{}", deadline=None, now=START).id  # fmt: skip
    _run(store, job_id, START)
    with store.transaction() as conn:
        StoreWrites.open_segment(conn, job_id, 1, PLACEMENT, 1, START)
    end = START + timedelta(minutes=20)
    with store.transaction() as conn:
        StoreWrites.close_segment(conn, job_id, "preempted", end)
        store.transition(
            conn, job_id, JobStatus.FAILED, end, f"gave up {HOSTILE}", FailureReason.TOO_MANY_RESTARTS
        )
    log = store.job_dir(job_id) / "attempt-1" / "node-0" / "output.log"
    log.parent.mkdir(parents=True)
    write_lines(log, ["starting", HOSTILE_LOG, "\x1b[2Jcleared?"])
    return job_id


def make_home(home: Path) -> dict[str, str]:
    store = JobStore(home)
    return {"finished": finished_job(store), "hostile": hostile_job(store)}
