"""Files the controller and the store create in the gpuctl home are opened as regular files only
(issue 29, finding 12): a symlink planted at `controller.lock`, `controller.log`, the store's init lock
or the store itself is refused, never followed, so its target is never written; a FIFO never hangs."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.controller.loop import ControllerLock, spawn_background_controller
from orchestrator.errors import PermanentError
from orchestrator.state.store import JobStore

SECRET = "precious contents\n"


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """The file an attacker's symlink points at (someone's config, say)."""
    path = tmp_path / "victim.conf"
    path.write_text(SECRET)
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_the_lock_refuses_a_planted_symlink_and_leaves_its_target(
    home: Path, target: Path, backend: str
) -> None:
    lock = ControllerLock(home, backend)
    lock.path.symlink_to(target)
    for take in (lock.acquire, lock.held_elsewhere):
        with pytest.raises(PermanentError, match="is a symbolic link, not a regular file") as caught:
            take()
        assert f"rm {lock.path}" in caught.value.message
    assert target.read_text() == SECRET and lock.path.is_symlink()


def test_the_lock_refuses_a_fifo_without_waiting(home: Path) -> None:
    lock = ControllerLock(home)
    os.mkfifo(lock.path)
    with pytest.raises(PermanentError, match="FIFO"):
        lock.acquire()


def test_the_lock_still_works_and_holds_the_pid(home: Path) -> None:
    lock = ControllerLock(home)
    assert lock.acquire() and lock.path.read_text() == str(os.getpid())
    other = ControllerLock(home)
    assert other.held_elsewhere() and not other.acquire()
    lock.release()
    assert other.acquire()
    other.release()


def test_controller_run_says_so_in_one_error(home: Path, target: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("GPUCTL_HOME", str(home))
    (home / "controller.lock").symlink_to(target)
    assert main(["controller", "run", "--backend", "local", "--exit-when-idle"]) == 1
    err = capsys.readouterr().err
    assert "controller.lock is a symbolic link" in err and "To fix" in err and "Traceback" not in err
    assert target.read_text() == SECRET


def test_the_background_controllers_log_refuses_a_planted_symlink(home: Path, target: Path) -> None:
    (home / "controller.log").symlink_to(target)
    with pytest.raises(PermanentError, match="symbolic link"):
        spawn_background_controller(home, "local")
    assert target.read_text() == SECRET


@pytest.mark.parametrize("name", ["gpuctl.db", "gpuctl.db-wal", "gpuctl.db-shm", "gpuctl.db.init-lock"])
def test_the_store_refuses_planted_symlinks(home: Path, target: Path, name: str) -> None:
    (home / name).symlink_to(target)
    with pytest.raises(PermanentError, match="symbolic link"):
        JobStore(home)
    assert target.read_text() == SECRET


def test_a_fifo_as_the_stores_init_lock_does_not_hang(home: Path) -> None:
    os.mkfifo(home / "gpuctl.db.init-lock")
    failed: list[BaseException] = []

    def open_store() -> None:
        try:
            JobStore(home)
        except BaseException as exc:
            failed.append(exc)

    worker = threading.Thread(target=open_store, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "opening the store hung on the FIFO"
    assert len(failed) == 1 and isinstance(failed[0], PermanentError) and "FIFO" in str(failed[0])
