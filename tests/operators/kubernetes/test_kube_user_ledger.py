"""A user's running jobs on other clusters and backends count against its ``max_jobs`` on this one, with
a ledger database (on SQLite and PostgreSQL), against the real kopf operator on the testing kit's
simulated cluster: the user's job waits PENDING while its job on another cluster runs, and starts
when the ledger says that one ended. On Kubernetes a GPUJob's user is its namespace."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.kubernetes.config import COST_CONFIG_ENV
from orchestrator.state.external_jobs import ExternalJob, record_external_job
from orchestrator.state.job_state import SegmentState
from orchestrator.state.status import JobStatus
from orchestrator.testing.states import SPOT
from tests.operators.kubernetes.operator_cluster import NS, Cluster, create_job, job_when
from tests.operators.kubernetes.operator_handlers import handlers

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator against an API emulator


def far_job(
    status: JobStatus, start: datetime, end: datetime | None
) -> tuple[ExternalJob, list[SegmentState]]:
    """User NS's GPUJob on cluster prod-us, as that cluster's operator records it."""
    job = ExternalJob(
        id="uid-far", name="far", user=NS, team="t", backend="kubernetes", cluster="prod-us", namespace=NS,
        status=status, failure_reason=None, message="", spec_json="{}", submitted_at=start,
        updated_at=end or start, attempts=1,
    )  # fmt: skip
    placement = dataclasses.replace(SPOT, node_price_usd_per_hour=2.0)
    return job, [SegmentState(attempt=1, placement=placement, nodes=1, started_at=start, ended_at=end)]


def _waiting(status: dict[str, Any]) -> bool:
    return status.get("state") == "PENDING" and any(
        c.get("type") == "Waiting" and c.get("status") == "True" and c.get("reason") == "UserJobs"
        for c in status.get("conditions") or []
    )


async def test_a_users_job_on_another_cluster_holds_its_max_jobs_slot_here(
    cluster: Cluster, ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert handlers is not None
    config = tmp_path / "costs.yaml"
    config.write_text("budgets:\n  default_user: {max_jobs: 1}\n")
    monkeypatch.setenv(COST_CONFIG_ENV, str(config))
    start = datetime.now(UTC) - timedelta(minutes=5)
    record_external_job(ledger, *far_job(JobStatus.RUNNING, start, None))

    await create_job(cluster, "here", 1)
    job = await job_when(cluster, "here", _waiting)
    waiting = next(c for c in job["status"]["conditions"] if c["type"] == "Waiting")
    assert f"user '{NS}' has 1 job(s) running or ahead in line" in waiting["message"]

    record_external_job(ledger, *far_job(JobStatus.SUCCEEDED, start, datetime.now(UTC)))  # it ended there
    await job_when(cluster, "here", lambda s: s.get("state") == "LAUNCHING")
