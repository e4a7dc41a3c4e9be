"""Two real `gpuctl controller run` on one PostgreSQL, a real workload on the local backend: the one
holding the job is killed with -9 mid-run, the other takes the job over within a few ticks, and the job
ends once, each node started once, the ledger adding up."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import select

from orchestrator.state.database_url import URL_ENV
from orchestrator.state.leases import LEASE_S, db_epoch
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.state.tables import job_leases
from orchestrator.testing.postgres import PostgresServer
from tests.controller.conftest import TINY, Gpuctl, write_job
from tests.controller.test_local_jobs import _assert_consistent_segments, _wait_no_node_processes

pytestmark = pytest.mark.slow

HOLD_AT = 5
"""The job's training waits at this step until the controller holding it was killed and replaced."""

T = TypeVar("T")


def _wait(what: str, probe: Callable[[], T | None], timeout: float = 120) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None and found is not False:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _holder_pid(store: JobStore, job_id: str) -> int | None:
    """The pid of the controller holding ``job_id``'s live lease (None: no live lease)."""
    t = job_leases
    with store.pinned(), store.connections.connection() as conn:
        holder = conn.execute(
            select(t.c.holder).where(t.c.job_id == job_id, t.c.expires_at >= db_epoch())
        ).scalar()
    return int(holder.split(":")[1]) if holder else None


def _started(log: Path) -> bool:
    return "gpuctl controller running" in log.read_text()


@pytest.fixture
def controllers(
    gpuctl: Gpuctl, postgres_server: PostgresServer, tmp_path: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two controllers of the local backend, one home, one PostgreSQL database (logs: controller-N.log)."""
    gpuctl.env[URL_ENV] = postgres_server.new_database()
    started: list[subprocess.Popen[bytes]] = []
    try:
        for index in range(2):
            log = tmp_path / f"controller-{index}.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "orchestrator.cli", "controller", "run"], env=gpuctl.env,
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
            started.append(proc)
            _wait(f"controller {index} to start", functools.partial(_started, log), 60)
        yield started
    finally:
        for proc in started:
            _stop_group(proc)
        _kill_home_processes(gpuctl.home)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM ``proc``'s process group; SIGKILL it when it has not ended 30 s later."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _kill_home_processes(home: Path) -> None:
    """SIGKILL every process started for ``home`` that is still running, pass or fail, and wait until
    they are gone: nodes, their workers and the rendezvous store run in sessions of their own, so
    stopping the controllers' groups leaves them (they all carry GPUCTL_HOME in their environment)."""
    killed = _home_processes(home)
    for pid, command in killed.items():
        print(f"killed a process left running: {pid} {command}", file=sys.stderr)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    _wait("the killed processes to end", lambda: not _home_processes(home), 30)


def _home_processes(home: Path) -> dict[int, str]:
    """The live (not zombie) processes whose environment names ``home``: pid -> command line."""
    marker = f"GPUCTL_HOME={home}".encode()
    found: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            ours = proc.name.isdigit() and marker in (proc / "environ").read_bytes().split(b"\0")
            if ours and (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    return found


def test_a_controller_killed_mid_run_is_replaced_and_nothing_runs_twice(
    gpuctl: Gpuctl, controllers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"  # the job waits before step HOLD_AT while it exists: killed mid-run for sure
    hold.touch()
    env = f"env: {{TINY_HOLD_AT_STEP: '{HOLD_AT}', TINY_HOLD_FILE: '{hold}'}}\n"
    job_file = write_job(tmp_path, "shared", f"command: {TINY} 30 0.2\nresources: {{nodes: 2}}\n{env}")
    job_id = gpuctl.run("submit", str(job_file), "--detach").stdout.strip().splitlines()[-1]
    store = JobStore(gpuctl.home, url=gpuctl.env[URL_ENV])
    gpuctl.wait_for(
        job_id, lambda d: d["state"] == "RUNNING" and (d.get("progress") or {}).get("step") == HOLD_AT
    )
    pids = {proc.pid: proc for proc in controllers}
    shown = _wait(
        "status to show the controller holding the job", lambda: gpuctl.status(job_id).get("controller")
    )
    holder = int(shown.split(":")[1])
    assert holder in pids and shown.startswith(socket.gethostname() + ":"), (shown, list(pids))

    os.kill(holder, signal.SIGKILL)
    pids[holder].wait(timeout=30)
    killed_at = time.monotonic()
    (survivor,) = (pid for pid in pids if pid != holder)
    _wait("the other controller to take the job over", lambda: _holder_pid(store, job_id) == survivor)
    took_s = time.monotonic() - killed_at
    assert took_s < LEASE_S + 5.0, f"took {took_s:.1f} s to take the job over (lease {LEASE_S} s)"
    assert store.job(job_id).status is JobStatus.RUNNING, "taken over mid-run"
    hold.unlink()

    doc = gpuctl.wait_for(job_id, lambda d: d["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=240)
    assert doc["state"] == "SUCCEEDED", doc
    assert doc["attempts"] == 1 and doc["preemptions"] == 0, doc
    _assert_consistent_segments(doc)
    assert len(doc["segments"]) == 1, doc["segments"]
    ledger = store.segments(job_id)
    assert len(ledger) == 1 and ledger[0].ended_at is not None, "one segment in the ledger, closed"

    statuses = Counter(e.status for e in store.events(job_id) if e.status is not None)
    assert statuses[JobStatus.RUNNING] == 1 and statuses[JobStatus.SUCCEEDED] == 1, statuses
    nodes = store.nodes(job_id)
    assert len(nodes) == 2 and {n.attempt for n in nodes} == {1}, nodes
    job_dir = gpuctl.home / "jobs" / job_id
    launches = {p.parent.name: p.read_text().split() for p in job_dir.glob("attempt-*/*/launches.log")}
    assert sorted(launches) == sorted(n.node_id for n in nodes), launches
    assert all(len(starts) == 1 for starts in launches.values()), f"a node started twice: {launches}"
    _wait_no_node_processes(job_dir)
