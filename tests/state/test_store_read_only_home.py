"""A read-only gpuctl home: the reading commands work, a writing one says what is wrong.

Tests run as root, for whom ``chmod`` does not stop a write, so the home is bind-mounted read-only
in a private mount namespace (``unshare -m``); a ``touch`` checks that writes really fail there."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.state.store import JobStore
from tests.state.namespaces import gpuctl, needs_mount_namespace, run_in_namespace

pytestmark = pytest.mark.slow  # mount namespaces and gpuctl subprocesses

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@needs_mount_namespace
@pytest.mark.parametrize("writer_active", [False, True], ids=["closed", "writer-with-wal"])
def test_read_only_home(tmp_path: Path, writer_active: bool) -> None:
    home = tmp_path / "home"
    store = JobStore(home)
    job_id = store.create_job(
        name="ro", user="ana", team="ml", backend="local", spec_json="{}", deadline=None, now=NOW
    ).id
    writer = None
    if writer_active:  # a controller elsewhere with a commit still in the -wal file, not checkpointed
        writer = sqlite3.connect(store.path, isolation_level=None)
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("UPDATE jobs SET message = 'in the wal' WHERE id = ?", (job_id,))
        assert Path(f"{store.path}-wal").stat().st_size > 0
    commands = [
        ["touch", str(home / "probe")],
        gpuctl("list", "-o", "json"),
        gpuctl("status", job_id, "-o", "json"),
    ]
    if not writer_active:  # the other commands open the store the same way: once is enough
        commands += [
            gpuctl("events", job_id),
            gpuctl("cost", "report", "-o", "json"),
            gpuctl("cancel", job_id),
        ]
    try:
        results = run_in_namespace(f"mount -o bind,ro {home} {home}", commands, home)
    finally:
        if writer is not None:
            writer.close()
    assert results[0]["rc"] != 0 and "Read-only file system" in results[0]["err"], "the home is read-only"
    for result in results[1:-1] if not writer_active else results[1:]:
        assert result["rc"] == 0 and result["err"] == "", result
    assert [d["id"] for d in json.loads(results[1]["out"])] == [job_id]
    assert json.loads(results[2]["out"])["message"] == ("in the wal" if writer_active else "")
    if writer_active:
        return
    _, _, _, events, report, cancel = results
    assert "submitted" in events["out"]
    assert json.loads(report["out"])["rows"] == []  # no segments yet: nothing cost anything
    assert cancel["rc"] == 1 and "Traceback" not in cancel["err"], cancel["err"]
    assert f"gpuctl: error: cannot write the job store {home / 'gpuctl.db'}" in cancel["err"]
    assert "To fix: make the gpuctl home writable" in cancel["err"]
