from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.errors import InternalError, NotFoundError
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore, StoreWrites

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def _job(store: JobStore) -> str:
    return store.create_job(
        name="j", user="u", team="t", backend="local", spec_json="{}", deadline=None, now=NOW
    ).id


def test_transition_writes_status_and_event_together(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    with store.transaction() as conn:
        store.transition(conn, job_id, JobStatus.PLACING, NOW, "placing")
    assert store.job(job_id).status is JobStatus.PLACING
    assert [e.status for e in store.events(job_id)] == [JobStatus.PENDING, JobStatus.PLACING]


def test_illegal_transition_rolls_back_the_whole_transaction(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    with pytest.raises(InternalError), store.transaction() as conn:
        StoreWrites.increment(conn, job_id, "preemptions")
        store.transition(conn, job_id, JobStatus.RUNNING, NOW, "skip ahead")
    job = store.job(job_id)
    assert job.status is JobStatus.PENDING and job.preemptions == 0


def test_segments_open_and_close(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    placement = {"gpu_type": "V100", "instance_type": "p3.2xlarge", "market": "spot", "cloud": "aws",
                 "region": "us-east-1", "zone": "use1-az1", "gpus_per_node": 1, "node_price_usd_per_hour": 1.0,
                 "on_demand_node_price_usd_per_hour": 3.0, "price_source": "test"}  # fmt: skip
    with store.transaction() as conn:
        StoreWrites.open_segment(conn, job_id, 1, placement, 2, NOW)
    with store.transaction() as conn:
        StoreWrites.close_segment(conn, job_id, "preempted", NOW.replace(hour=13))
    (seg,) = store.segments(job_id)
    assert seg.cost_usd(NOW) == pytest.approx(2.0) and seg.on_demand_equivalent_usd(NOW) == pytest.approx(6.0)
    assert seg.end_reason == "preempted"


def test_job_lookup_by_prefix_and_name(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    assert store.job(job_id[:4]).id == job_id
    assert store.job("j").id == job_id
    with pytest.raises(NotFoundError):
        store.job("nope")
