"""A full disk under the job store: the write fails with a clear error, and every committed job is
still there (``PRAGMA integrity_check`` ok). Runs on a 1 MiB tmpfs in a private mount namespace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.state.namespaces import gpuctl, needs_mount_namespace, run_in_namespace

pytestmark = pytest.mark.slow  # a tmpfs in a mount namespace and gpuctl subprocesses

FILL_AND_WRITE = """
import errno, json, os, sys
from datetime import UTC, datetime
from pathlib import Path
from orchestrator.errors import GpuctlError
from orchestrator.state import database
from orchestrator.state.store import JobStore

disk, big = Path(sys.argv[1]), sys.argv[2]
store = JobStore(disk / "home")
now = datetime.now(UTC)
def submit(name, spec_json="{}"):
    return store.create_job(name=name, user="u", team="t", backend="local", spec_json=spec_json,
                            deadline=None, now=now).id
ids = [submit(f"kept{i}") for i in range(5)]
holder = database.connect(store.path, read_only=False)  # as a running controller keeps one open
holder.execute("SELECT count(*) FROM jobs").fetchall()
fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(fd, b"\\0" * 4096)
except OSError as exc:
    filled = exc.errno == errno.ENOSPC
os.close(fd)
def write_big():
    try:
        submit("big", json.dumps({"blob": "x" * int(big)}))
        return None
    except GpuctlError as exc:
        return {"type": type(exc).__name__, "message": exc.message, "cause": exc.__cause__.sqlite_errorname}
errors = [write_big()]  # with -wal and -shm in place: fails in COMMIT
holder.close()  # the last connection: -wal and -shm go, and a new connection cannot make its -shm
errors.append(write_big())
print(json.dumps({"ids": ids, "filled": filled, "errors": errors}))
"""

CHECK_AND_RECOVER = """
import json, os, sys
from datetime import UTC, datetime
from pathlib import Path
from orchestrator.state import database
from orchestrator.state.store import JobStore

disk = Path(sys.argv[1])
conn = database.connect(disk / "home" / "gpuctl.db", read_only=True)  # as gpuctl's readers open it
integrity = [r[0] for r in conn.execute("PRAGMA integrity_check")]
conn.close()
before = [j.name for j in JobStore(disk / "home", read_only=True).list_jobs()]
os.remove(disk / "filler")
store = JobStore(disk / "home")
store.create_job(name="after", user="u", team="t", backend="local", spec_json="{}", deadline=None,
                 now=datetime.now(UTC))
print(json.dumps({"integrity": integrity, "before": before, "after": [j.name for j in store.list_jobs()]}))
"""

BIG_JOB = """name: huge
command: train.py
resources: {{gpu_types: [H100], gpus_per_node: 1, nodes: 1}}
env: {{{env}}}
"""


@needs_mount_namespace
def test_a_full_disk_keeps_every_committed_job_and_says_what_to_do(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    job_file = tmp_path / "huge.yaml"  # outside the full disk
    # 420 kB, each value within the spec's limit
    blobs = ", ".join(f'BLOB{i}: "{"y" * 30_000}"' for i in range(14))
    job_file.write_text(BIG_JOB.format(env=blobs))
    home = disk / "home"
    results = run_in_namespace(
        f"mount -t tmpfs -o size=1m,mode=0755 gpuctl-test {disk}",
        [
            [sys.executable, "-c", FILL_AND_WRITE, str(disk), "400000"],
            gpuctl("submit", str(job_file), "--detach"),
            gpuctl("list", "-o", "json"),
            [sys.executable, "-c", CHECK_AND_RECOVER, str(disk)],
        ],
        home,
    )
    fill, submit, listed, check = results
    assert fill["rc"] == 0, fill["err"]
    written = json.loads(fill["out"])
    assert written["filled"], "the filler file ran the tmpfs full"
    first, second = written["errors"]
    assert first is not None and second is not None, "a write on a full disk did not fail"
    assert first["cause"] == "SQLITE_FULL"  # how SQLite says it depends on which file could not grow
    assert second["cause"] in ("SQLITE_FULL", "SQLITE_IOERR_SHMSIZE")
    for error in (first, second):
        assert error["type"] == "TemporaryError"
        assert f"the disk holding the job store {home / 'gpuctl.db'} is full" in error["message"]
        assert "nothing was changed, and what was committed before is intact" in error["message"]
        assert "To fix: free space on that disk" in error["message"]

    assert submit["rc"] == 1 and "Traceback" not in submit["err"], submit["err"]
    assert (
        submit["err"].startswith("gpuctl: error: the disk holding the job store")
        and "To fix:" in submit["err"]
    )

    assert listed["rc"] == 0, listed["err"]
    assert sorted(d["id"] for d in json.loads(listed["out"])) == sorted(written["ids"])

    assert check["rc"] == 0, check["err"]
    after = json.loads(check["out"])
    assert after["integrity"] == ["ok"]
    assert after["before"] == [f"kept{i}" for i in range(5)]
    assert after["after"] == [*after["before"], "after"], "the store works again once there is space"
