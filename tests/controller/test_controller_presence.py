"""Whether a controller runs (`controller_running`: what `list` and `status` show as `managed`), and the
lock handed from an interrupted `submit` to the background controller it starts (issue 32, item 1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.controller.loop import LOCK_FD_ENV, ControllerLock, controller_running

HOLDER = """
import os, sys
from pathlib import Path
from orchestrator.controller.loop import ControllerLock
lock = ControllerLock(Path(sys.argv[1]))
held = lock.adopt_inherited() if sys.argv[2] == "adopt" else lock.acquire()
print("held" if held else "not held", flush=True)
sys.stdin.read()  # until the test closes it or kills this process
"""


def _holder(home: Path, how: str, lock: ControllerLock | None = None) -> subprocess.Popen[str]:
    env = {**os.environ}
    fds: tuple[int, ...] = ()
    if lock is not None and lock.fd is not None:
        env[LOCK_FD_ENV], fds = str(lock.fd), (lock.fd,)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(home), how], env=env, pass_fds=fds, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_live_holder_is_a_controller_and_a_killed_one_is_not(tmp_path: Path) -> None:
    assert not controller_running(tmp_path)
    assert not (tmp_path / "controller.lock").exists(), "the probe creates nothing"
    holder = _holder(tmp_path, "acquire")
    try:
        assert controller_running(tmp_path) and not controller_running(tmp_path, "slurm")
        assert not ControllerLock(tmp_path).acquire()
    finally:
        _kill(holder)
    assert (tmp_path / "controller.lock").read_text() == str(holder.pid), "its pid is left behind"
    assert not controller_running(tmp_path), "a killed controller holds nothing"


def test_the_probe_leaves_the_lock_free(tmp_path: Path) -> None:
    ControllerLock(tmp_path).path.touch()
    for _ in range(100):
        assert not controller_running(tmp_path)
    lock = ControllerLock(tmp_path)
    assert lock.acquire()
    lock.release()


def test_a_held_lock_is_handed_to_a_child_without_a_gap(tmp_path: Path) -> None:
    lock = ControllerLock(tmp_path)
    assert lock.acquire()
    child = _holder(tmp_path, "adopt", lock)
    try:
        lock.release()  # the parent lets go: the child holds it still
        assert controller_running(tmp_path)
        assert (tmp_path / "controller.lock").read_text() == str(child.pid)
    finally:
        _kill(child)
    assert not controller_running(tmp_path)


@pytest.mark.parametrize("value", ["0", "999", "x", ""])
def test_a_stray_handed_lock_variable_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(LOCK_FD_ENV, value)
    lock = ControllerLock(tmp_path)
    lock.path.touch()
    assert not lock.adopt_inherited() and LOCK_FD_ENV not in os.environ
    assert lock.fd is None
