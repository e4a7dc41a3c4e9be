"""`gpuctl list` and `status` mark an unfinished local or SLURM job that no controller manages (no
live process holds the controller lock of its home and backend), with the command that starts one
(issue 32, item 1). The real-process form (SIGKILL of a controller) is in
tests/controller/test_interrupted_submit.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import main
from orchestrator.controller.actions import Transition
from orchestrator.controller.loop import ControllerLock
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing.states import drive

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobStore:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    return JobStore(tmp_path)


@pytest.fixture
def controller(store: JobStore) -> Iterator[ControllerLock]:
    """The lock a running local controller holds (taken here, as the controller takes it)."""
    lock = ControllerLock(store.home)
    assert lock.acquire()
    yield lock
    lock.release()


def _job(store: JobStore, name: str, backend: str = "local", ended: bool = False) -> str:
    job_id = store.create_job(name=name, user="u", team="t", backend=backend, spec_json="{}", deadline=None,
                              now=NOW).id  # fmt: skip
    if ended:
        drive(store, job_id, NOW, Transition(JobStatus.CANCELLED, "cancelled"))
    return job_id


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main([*argv, "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_list_and_status_mark_a_job_no_controller_manages(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    waiting, ended = _job(store, "waiting"), _job(store, "ended", ended=True)
    docs = {d["id"]: d for d in _json(capsys, "list")}
    assert docs[waiting]["managed"] is False and docs[ended]["managed"] is None
    assert _json(capsys, "status", waiting)["managed"] is False

    assert main(["list"]) == 0
    out, err = capsys.readouterr()
    row = next(line for line in out.splitlines() if waiting in line)
    assert "PENDING (unmanaged)" in row
    assert "unmanaged" not in next(line for line in out.splitlines() if ended in line)
    assert f"no gpuctl controller is running for 1 unfinished local job(s) ({waiting})" in err
    assert "To fix: start one: `gpuctl controller run --detach`" in err

    assert main(["status", waiting]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("not managed: no gpuctl controller is running for it")
    assert "To fix: start one: `gpuctl controller run --detach`" in lines[1]


def test_a_running_controller_manages_them(
    store: JobStore, controller: ControllerLock, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _job(store, "waiting")
    assert _json(capsys, "status", job)["managed"] is True
    assert main(["list"]) == 0
    out, err = capsys.readouterr()
    assert "unmanaged" not in out and err == ""
    assert main(["status", job]) == 0
    assert "not managed" not in capsys.readouterr().out


def test_the_lock_file_of_a_dead_controller_is_not_a_controller(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a controller killed with -9 leaves: the lock file with its pid, but no lock."""
    job = _job(store, "waiting")
    (store.home / "controller.lock").write_text(str(os.getpid()))  # even a live pid: no lock, no controller
    assert _json(capsys, "status", job)["managed"] is False


def test_each_backend_has_its_own_controller(
    store: JobStore, controller: ControllerLock, capsys: pytest.CaptureFixture[str]
) -> None:
    local, slurm = _job(store, "here"), _job(store, "there", backend="slurm")
    docs = {d["id"]: d for d in _json(capsys, "list")}
    assert docs[local]["managed"] is True and docs[slurm]["managed"] is False
    assert main(["list"]) == 0
    err = capsys.readouterr().err
    assert f"1 unfinished slurm job(s) ({slurm})" in err
    assert "`gpuctl controller run --detach --backend slurm`" in err


def test_controller_run_detach_says_when_one_runs_already(
    store: JobStore, controller: ControllerLock, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["controller", "run", "--detach"]) == 0
    assert "already running" in capsys.readouterr().out
