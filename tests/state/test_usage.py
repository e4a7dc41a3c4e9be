"""Storing the monitors' window summaries: incremental, partial lines wait, restarts count nothing twice."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from orchestrator.monitor.samples import read_sample_ticks
from orchestrator.monitor.summary import unavailable_record
from orchestrator.state.store import JobStore
from orchestrator.state.usage import NO_NVML_MESSAGE, UsageStore, usage_from_files
from tests.state.replay_windows import REPLAY, replay_window_records

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def _job(store: JobStore) -> str:
    return store.create_job(
        name="j", user="u", team="t", backend="local", spec_json="{}", deadline=None, now=NOW
    ).id


@pytest.fixture(scope="module")
def window_lines() -> list[str]:
    """The replay file summarised in 10 s windows, as the monitor writes them."""
    records = replay_window_records(10.0)
    return [json.dumps(r) + "\n" for r in records]


def test_ingests_new_lines_only_and_leaves_a_partial_line_for_later(
    tmp_path: Path, window_lines: list[str]
) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    file = store.job_dir(job_id) / "monitor-summary-n0.jsonl"
    usage = UsageStore(store)
    half = window_lines[5]
    file.write_text("".join(window_lines[:5]) + half[:40])
    assert usage.ingest(job_id, NOW) == 5
    assert usage.ingest(job_id, NOW) == 0
    with file.open("a") as fh:
        fh.write(half[40:] + "".join(window_lines[6:]))
    assert usage.ingest(job_id, NOW) == len(window_lines) - 5
    assert len(usage.windows(job_id)) == len(window_lines)

    # a restarted controller (new objects), and one that lost its offsets: nothing is stored twice
    again = UsageStore(JobStore(tmp_path))
    assert again.ingest(job_id, NOW) == 0
    with store.transaction() as conn:
        conn.execute(text("DELETE FROM gpu_usage_files"))
    assert again.ingest(job_id, NOW) == 0
    assert len(again.windows(job_id)) == len(window_lines)


def test_aggregate_matches_the_raw_samples(tmp_path: Path, window_lines: list[str]) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    (store.job_dir(job_id) / "monitor-summary-n0.jsonl").write_text("".join(window_lines))
    usage = UsageStore(store)
    usage.ingest(job_id, NOW)
    got = usage.usage(job_id)
    assert got is not None
    samples = [s for tick in read_sample_ticks(REPLAY) for s in tick]
    assert got.samples == len(samples) == 960
    assert got.util_mean_pct == pytest.approx(sum(s.util_pct for s in samples) / len(samples), abs=1e-2)
    assert got.util_max_pct == max(s.util_pct for s in samples)
    assert got.mem_peak_bytes == max(s.mem_used_bytes for s in samples)
    assert got.mem_peak_fraction == pytest.approx(got.mem_peak_bytes / samples[0].mem_total_bytes, abs=1e-4)
    windows = [json.loads(line) for line in window_lines]
    assert got.idle_gpu_hours == pytest.approx(sum(w["idle_seconds"] for w in windows) / 3600, abs=1e-6)
    assert got.util_mean_pct <= got.util_p95_pct <= got.util_max_pct
    assert got.sm_activity_mean is not None and 0 < got.sm_activity_mean < 1
    assert got.windows == len(window_lines) and got.monitors == 1
    assert usage_from_files(store.job_dir(job_id)) == got


def test_no_nvml_on_two_nodes_is_one_event_and_bad_lines_are_skipped(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    line = json.dumps(unavailable_record(job_id, "no_nvml", "NVML could not be loaded")) + "\n"
    for node in ("n0", "n1"):
        (store.job_dir(job_id) / f"monitor-summary-{node}.jsonl").write_text("not json\n" + line)
    usage = UsageStore(store)
    assert usage.ingest(job_id, NOW) == 0
    usage.ingest(job_id, NOW)
    events = [e for e in store.events(job_id) if e.kind == "gpu_monitor"]
    assert [e.message for e in events] == [NO_NVML_MESSAGE]
    assert usage.usage(job_id) is None
    assert usage.offsets(job_id) == {"monitor-summary-n0.jsonl": len("not json\n" + line),
                                     "monitor-summary-n1.jsonl": len("not json\n" + line)}  # fmt: skip


def test_every_activity_of_a_round_is_each_jobs_activity(tmp_path: Path, window_lines: list[str]) -> None:
    store = JobStore(tmp_path)
    usage = UsageStore(store)
    measured, idle, unmeasured = _job(store), _job(store), _job(store)
    (store.job_dir(measured) / "monitor-summary-n0.jsonl").write_text("".join(window_lines))
    quiet = [json.dumps({**json.loads(line), "util_mean_pct": 0.0}) + "\n" for line in window_lines[:3]]
    (store.job_dir(idle) / "monitor-summary-n0.jsonl").write_text("".join(quiet))
    for job_id in (measured, idle):
        assert usage.ingest(job_id, NOW) > 0
    found = usage.every_activity([measured, idle, unmeasured])
    assert found == {job_id: usage.activity(job_id) for job_id in (measured, idle)}
    assert found[idle].busy_until is None and usage.activity(unmeasured) is None
