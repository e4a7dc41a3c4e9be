"""The ledger rows of jobs run elsewhere (a GPUJob's operator): one transaction, idempotent, keyed by
(job id, segment index), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from orchestrator.spec.market import MarketKind
from orchestrator.state import database
from orchestrator.state.external_jobs import ExternalJob, configured_database_url, record_external_job
from orchestrator.state.job_state import SegmentState
from orchestrator.state.placement import Placement
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
PLACEMENT = Placement(
    gpu_type="H100", instance_type="p5.48xlarge", market=MarketKind.SPOT, cloud="aws", region="us-east-1",
    zone="us-east-1a", gpus_per_node=8, node_price_usd_per_hour=10.0,
    on_demand_node_price_usd_per_hour=30.0, price_source="list",
)  # fmt: skip


def _job(status: JobStatus, updated: datetime, **fields: object) -> ExternalJob:
    base: dict[str, object] = dict(
        id="uid-1", name="train", user="ml", team="vision", backend="kubernetes", cluster="prod-eu",
        namespace="ml", status=status, failure_reason=None, message="", spec_json='{"command": "t.py"}',
        submitted_at=T0, updated_at=updated, attempts=1,
    )  # fmt: skip
    return ExternalJob(**{**base, **fields})  # type: ignore[arg-type]


def _segment(
    start: datetime, end: datetime | None, reason: str | None = None, nodes: int = 2
) -> SegmentState:
    return SegmentState(
        attempt=1, placement=PLACEMENT, nodes=nodes, started_at=start, ended_at=end, end_reason=reason
    )


def _rows(url: str) -> list[tuple[object, ...]]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(
                "SELECT seq, nodes, started_at, ended_at, end_reason FROM segments ORDER BY seq"))]  # fmt: skip
    finally:
        engine.dispose()


def test_a_job_and_its_segments_are_recorded_once_whatever_is_written_again(
    database_url: str, tmp_path: Path
) -> None:
    first = _segment(T0, T0 + timedelta(hours=1), "preempted")
    running = _job(JobStatus.RUNNING, T0 + timedelta(hours=1))
    record_external_job(database_url, running, [first, _segment(T0 + timedelta(hours=1), None)])
    before = _rows(database_url)
    record_external_job(database_url, running, [first, _segment(T0 + timedelta(hours=1), None)])
    assert _rows(database_url) == before and len(before) == 2  # the same write twice: unchanged

    closed = _segment(T0 + timedelta(hours=1), T0 + timedelta(hours=3), "succeeded")
    record_external_job(database_url, _job(JobStatus.SUCCEEDED, T0 + timedelta(hours=3)), [first, closed])
    # a late write of an older state neither reopens the closed segment nor rewinds the job
    record_external_job(database_url, running, [first, _segment(T0 + timedelta(hours=1), None, nodes=5)])
    store = JobStore(tmp_path, read_only=True, url=database_url)
    (job,) = store.list_jobs()
    assert (job.id, job.status, job.cluster, job.namespace, job.backend) == (
        "uid-1",
        JobStatus.SUCCEEDED,
        "prod-eu",
        "ml",
        "kubernetes",
    )
    segments = store.segments("uid-1")
    assert [(s.nodes, s.end_reason) for s in segments] == [(2, "preempted"), (2, "succeeded")]
    assert sum(s.cost_usd(T0 + timedelta(hours=9)) for s in segments) == pytest.approx(60.0)


def test_a_second_row_with_the_same_segment_key_is_refused(database_url: str) -> None:
    assert database.upgrade_schema(database_url) == database.HEAD_REVISION
    record_external_job(database_url, _job(JobStatus.RUNNING, T0), [_segment(T0, None)])
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    try:
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO segments (job_id, seq, attempt, gpu_type, instance_type, market, cloud, region, zone,"
                " nodes, gpus_per_node, started_at, node_price_usd_per_hour, on_demand_node_price_usd_per_hour,"
                " price_source) VALUES ('uid-1', 0, 1, 'H100', 'p5', 'spot', 'aws', 'r', 'z', 1, 8, 't', 1, 1, 'l')"
            ))  # fmt: skip
    finally:
        engine.dispose()


def test_a_database_is_configured_only_when_a_url_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUCTL_DATABASE_URL", raising=False)
    assert configured_database_url(tmp_path) is None
    monkeypatch.setenv("GPUCTL_DATABASE_URL", f"sqlite:///{tmp_path / 'team.db'}")
    assert configured_database_url(tmp_path) == f"sqlite:///{tmp_path / 'team.db'}"
