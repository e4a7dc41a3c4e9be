"""The cost report's diagnosis of every job (``stored_fixes``): the same fixes as diagnosing each job on
its own, with no file looked for of a job the listing of job folders does not name."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.cli.avoidable_view import (
    job_findings,
    job_folders,
    job_windows,
    may_have_folder,
    stored_fixes,
)
from orchestrator.state.job_dir import job_dir_path
from orchestrator.state.store import JobStore
from orchestrator.testing.states import running_job
from tests.cli.hostile_home import write_lines

STARTED = datetime.now(UTC) - timedelta(hours=2)


def _input_bound(store: JobStore, job_id: str) -> None:
    write_lines(store.job_dir(job_id) / "progress.jsonl", [
        json.dumps({"time": (STARTED + timedelta(seconds=s)).isoformat(), "step": s, "total_steps": 10_000,
                    "data_s": 0.3, "compute_s": 0.7}) for s in range(1, 40)
    ])  # fmt: skip


def _codes(found: object) -> set[str]:
    return {fix.code for fix in getattr(found, "fixes", ())}


def test_the_report_diagnoses_each_job_as_alone_and_skips_files_of_jobs_without_a_folder(
    tmp_path: Path,
) -> None:
    writer = JobStore(tmp_path)
    slow = running_job(writer, STARTED, name="slow")
    _input_bound(writer, slow)
    bare = running_job(writer, STARTED, name="bare")
    shutil.rmtree(job_dir_path(tmp_path, bare), ignore_errors=True)
    store = JobStore(tmp_path, read_only=True)
    now = datetime.now(UTC)
    assert job_folders(tmp_path) == {slow}

    found = stored_fixes(store, now)
    for job in store.list_jobs():  # each job diagnosed on its own, every file looked for
        alone = job_findings(store, job, now, store.segments(job.id), None, None, job_windows(store, job.id))
        assert found.fixes[job.id] == alone[1]
    assert "input-bound" in _codes(found.fixes[slow])

    told = stored_fixes(store, now, folders=set())  # the caller's listing: no folder, so no file is read
    assert "input-bound" not in _codes(told.fixes[slow])
    assert told.fixes[bare] == found.fixes[bare]


def test_an_id_that_is_not_one_plain_name_is_looked_for_as_always() -> None:
    assert not may_have_folder("abc", set())
    assert may_have_folder("abc", {"abc"})
    for odd in ("a/b", "", ".", ".."):
        assert may_have_folder(odd, set())
