"""A controller round reads its jobs' rows, current nodes and segments at once: the same state as
each job's own reads, on both engines."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import insert

from orchestrator.state.round_rows import round_rows
from orchestrator.state.state_rows import load_state
from orchestrator.state.store import JobStore
from orchestrator.state.tables import nodes
from orchestrator.testing.states import running_job, submit

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def test_a_rounds_rows_load_the_state_each_jobs_own_reads_load(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    two_nodes, one_node, pending = (
        running_job(store, NOW, nodes=2, name="a"), running_job(store, NOW, name="b"), submit(store, NOW)
    )  # fmt: skip
    with store.transaction() as conn:  # a node of an earlier attempt: not the current attempt's
        conn.execute(insert(nodes), {"node_id": "old-a0-n0", "job_id": two_nodes, "attempt": 0,
                                     "launch_state": "ended", "created_at": NOW.isoformat()})  # fmt: skip
    found = round_rows(store, [two_nodes, one_node, pending, "no-such-job"])
    assert set(found) == {two_nodes, one_node, pending}
    for job_id, rows in found.items():
        assert load_state(store, job_id, rows) == load_state(store, job_id)
        assert store.nodes_in(rows) == (
            store.nodes(job_id, rows.record.attempts) if rows.record.attempts else []
        )
        assert store.segments_in(rows) == store.segments(job_id)
    assert len(store.nodes_in(found[two_nodes])) == 2
