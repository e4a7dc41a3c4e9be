"""Per-job leases on both engines: take, renew, expiry, fencing, release, and no job held twice."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Connection, select

from orchestrator.state.leases import JobLeases, LeaseLost, live_holders
from orchestrator.state.store import JobStore, StoreWrites
from orchestrator.state.tables import job_leases


@pytest.fixture
def store(tmp_path: Path, database_url: str) -> JobStore:
    return JobStore(tmp_path / "home", url=database_url)


def _leases(store: JobStore) -> dict[str, tuple[str, int]]:
    with store.transaction() as conn:
        rows = conn.execute(select(job_leases.c.job_id, job_leases.c.holder, job_leases.c.generation))
        return {r.job_id: (r.holder, r.generation) for r in rows}


def test_a_free_job_is_taken_once_and_renewed_by_its_holder(store: JobStore) -> None:
    a, b = JobLeases(store, "a"), JobLeases(store, "b")
    assert a.take(["j1", "j2"]) == {"j1": 1, "j2": 1}
    assert b.take(["j1", "j2", "j3"]) == {"j3": 1}, "b takes only the free one"
    assert a.take(["j1", "j2", "j3"]) == {"j1": 1, "j2": 1}, "renewed: same generation; j3 is b's"
    assert _leases(store) == {"j1": ("a", 1), "j2": ("a", 1), "j3": ("b", 1)}
    with store.transaction() as conn:
        assert live_holders(conn, ["j1", "j3", "j9"]) == {"j1": "a", "j3": "b"}


def test_an_expired_lease_changes_hands_with_a_new_generation(store: JobStore) -> None:
    stalled = JobLeases(store, "a", lease_s=-1.0)  # its lease expires as soon as it is written
    assert stalled.take(["j1"]) == {"j1": 1}
    other = JobLeases(store, "b")
    assert other.take(["j1"]) == {"j1": 2}
    assert stalled.take(["j1"]) == {}, "the new holder's lease is live"
    with store.transaction() as conn:
        assert live_holders(conn, ["j1"]) == {"j1": "b"}


def test_a_write_fenced_by_a_lost_lease_is_rolled_back(store: JobStore) -> None:
    job = store.create_job(name="n", user="u", team="t", backend="local", spec_json="{}", deadline=None,
                           now=_now())  # fmt: skip
    stalled = JobLeases(store, "a", lease_s=-1.0)
    generation = stalled.take([job.id])[job.id]
    with pytest.raises(LeaseLost), store.transaction() as conn:  # expired, even before anyone took it
        stalled.fence(conn, job.id, generation)
    new = JobLeases(store, "b")
    taken = new.take([job.id])[job.id]
    with pytest.raises(LeaseLost), store.transaction() as conn:
        stalled.fence(conn, job.id, generation)
    with store.transaction() as conn:  # the holder's own write goes through (and extends its lease)
        new.fence(conn, job.id, taken)
        store_event(conn, job.id)
    with pytest.raises(LeaseLost), store.transaction() as conn:  # its own earlier generation: fenced
        new.fence(conn, job.id, taken - 1)
    assert [e.kind for e in store.events(job.id)].count("fenced_write") == 1


def test_a_released_lease_is_taken_at_once(store: JobStore) -> None:
    a, b = JobLeases(store, "a"), JobLeases(store, "b")
    a.take(["j1", "j2"])
    a.release()
    assert b.take(["j1", "j2"]) == {"j1": 2, "j2": 2}


def test_controllers_taking_together_never_share_a_job(store: JobStore) -> None:
    ids = [f"j{i:03d}" for i in range(60)]
    held: dict[str, dict[str, int]] = {}

    def take(name: str, order: list[str]) -> None:
        held[name] = JobLeases(store, name).take(order)

    threads = [threading.Thread(target=take, args=(f"c{i}", ids[::-1] if i % 2 else ids)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    owners = [job for taken in held.values() for job in taken]
    assert sorted(owners) == ids, "every job held by exactly one controller"


def store_event(conn: Connection, job_id: str) -> None:
    StoreWrites.event(conn, job_id, _now(), "fenced_write", "written under a live lease")


def _now() -> datetime:
    return datetime.now(UTC)
