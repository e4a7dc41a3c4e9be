"""A GPUCTL_HOME for the dashboard's tests, made with the job store: ended jobs (whose numbers no
longer move, so the dashboard's JSON can equal the CLI's exactly), one of them named by a hostile
team and user, with progress, monitor windows and a log that holds markup."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.catalog.offers import MarketKind
from orchestrator.controller.actions import CloseSegment, CountPreemption, StartAttempt, Transition
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore
from orchestrator.state.usage import UsageStore
from orchestrator.testing.states import SPOT, drive
from tests.cli.hostile_home import WINDOW, write_lines

HOSTILE = "<img src=x onerror=alert(1)>"
HOSTILE_USER = '"><script>alert(2)</script>'
HOSTILE_LOG = "<script>alert(3)</script> & done"
START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
ON_DEMAND = replace(SPOT, market=MarketKind.ON_DEMAND, node_price_usd_per_hour=3.0, zone="use1-az2")


def _run(store: JobStore, job_id: str, t: datetime, nodes: int) -> None:
    """PENDING to RUNNING at ``t``, attempt 1 on ``nodes`` spot nodes."""
    launch = [
        Transition(s, f"{str(s).lower()} (policy: spot has capacity)")
        for s in (JobStatus.PLACING, JobStatus.LAUNCHING)
    ]
    running = Transition(JobStatus.RUNNING, "running (policy: spot has capacity)")
    drive(store, job_id, t, *launch, StartAttempt(SPOT, nodes), running)


def finished_job(store: JobStore) -> str:
    """Attempt 1 on spot, preempted after an hour; attempt 2 on on-demand, succeeded."""
    job_id = store.create_job(name="trainer", user="ana", team="ml", backend="local", spec_json="{}",
                              deadline=None, now=START).id  # fmt: skip
    _run(store, job_id, START, nodes=2)
    later = START + timedelta(hours=1)
    drive(
        store, job_id, later, CloseSegment("preempted"), CountPreemption(),
        Transition(JobStatus.PREEMPTED, "spot capacity reclaimed"),
        Transition(JobStatus.RECOVERING, "resuming from step 40"),
        Transition(JobStatus.LAUNCHING, "on-demand: no spot in any zone"), StartAttempt(ON_DEMAND, 1),
        Transition(JobStatus.RUNNING, "running"),
    )  # fmt: skip
    end = later + timedelta(minutes=30)
    drive(store, job_id, end, CloseSegment("finished"), Transition(JobStatus.SUCCEEDED, "training finished"))
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
    _run(store, job_id, START, nodes=1)
    end = START + timedelta(minutes=20)
    gave_up = Transition(JobStatus.FAILED, f"gave up {HOSTILE}", FailureReason.TOO_MANY_RESTARTS)
    drive(store, job_id, end, CloseSegment("preempted"), gave_up)
    log = store.job_dir(job_id) / "attempt-1" / "node-0" / "output.log"
    log.parent.mkdir(parents=True)
    write_lines(log, ["starting", HOSTILE_LOG, "\x1b[2Jcleared?"])
    return job_id


def make_home(home: Path) -> dict[str, str]:
    store = JobStore(home)
    return {"finished": finished_job(store), "hostile": hostile_job(store)}
