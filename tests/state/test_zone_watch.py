"""The market log in the job store: spans of one capacity per zone, extended tick by tick."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.state.store import JobStore
from orchestrator.state.zone_watch import KEEP_S, MAX_GAP_S, REWRITE_S, WatchedSpan, ZoneWatch

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_zones_capacity_is_kept_as_spans(tmp_path: Path) -> None:
    watch = ZoneWatch(JobStore(tmp_path))
    for t, capacity in ((0, 2), (10, 2), (20, 0), (30, 0), (40, None)):
        watch.record({"a": capacity, "b": 1}, at(t))
    t0 = T0.timestamp()
    assert watch.spans(["a"], at(0), at(100)) == [
        WatchedSpan("a", t0, t0 + 10, 2),
        WatchedSpan("a", t0 + 10, t0 + 30, 0),  # a change leaves no hole: it begins where the last ended
        WatchedSpan("a", t0 + 30, t0 + 40, None),
    ]
    assert watch.spans(["b"], at(0), at(100)) == [WatchedSpan("b", t0, t0 + 40, 1)]
    # a zone not looked at for longer than the gap: nobody watched in between
    watch.record({"b": 1}, at(40 + MAX_GAP_S + 1))
    assert [(s.begin_s - t0, s.end_s - t0) for s in watch.spans(["b"], at(0), at(10_000))] == [
        (0, 40),
        (40 + MAX_GAP_S + 1, 40 + MAX_GAP_S + 1),
    ]
    assert watch.spans(["b"], at(50), at(60)) == []  # nothing overlaps the gap


def test_old_spans_are_dropped_and_a_jobs_log_is_kept_once(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    watch = ZoneWatch(store)
    watch.record({"a": 1}, at(0))
    watch.record({"a": 1}, at(KEEP_S + 1000))
    assert [s.begin_s - T0.timestamp() for s in watch.spans(["a"], at(0), at(2 * KEEP_S))] == [KEEP_S + 1000]
    job = store.create_job(
        name="j", user="u", team="t", backend="local", spec_json="{}", deadline=None, now=T0
    )
    assert watch.job_log(job.id) is None
    watch.set_job_log(job.id, {"first": 1})
    watch.set_job_log(job.id, {"second": 2})
    assert ZoneWatch(JobStore(tmp_path)).job_log(job.id) == {"first": 1}


def test_an_unchanged_capacity_is_written_at_most_every_few_seconds(tmp_path: Path) -> None:
    """A controller ticking many jobs on the same zones writes each zone once, not once per job."""
    watch = ZoneWatch(JobStore(tmp_path))
    t0 = T0.timestamp()
    watch.record({"a": 2}, at(0))
    watch.record({"a": 2}, at(REWRITE_S / 2))  # the next job's tick: nothing written
    assert watch.spans(["a"], at(0), at(100)) == [WatchedSpan("a", t0, t0, 2)]
    ZoneWatch(JobStore(tmp_path)).record({"a": 2}, at(1))  # another controller writes its own look
    watch.record({"a": 0}, at(2))  # a change is written at once
    watch.record({"a": 0}, at(2 + REWRITE_S))  # and an unchanged one again after REWRITE_S
    assert watch.spans(["a"], at(0), at(100)) == [
        WatchedSpan("a", t0, t0 + 1, 2),
        WatchedSpan("a", t0 + 1, t0 + 2 + REWRITE_S, 0),
    ]
