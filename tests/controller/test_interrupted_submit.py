"""Ctrl-C on an attached `gpuctl submit`, for real (issue 32, item 1): SIGINT to its process group, as a
terminal sends it, once the job runs. The job goes on under a background controller that took the
submit's lock over, the CLI says how to follow and cancel it, and the job succeeds. A second Ctrl-C
while handing over changes nothing. A controller killed with -9 leaves the job unmanaged, which `list`
and `status` say, with the fix that works."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.controller.loop import controller_running
from tests.controller.conftest import TINY, Gpuctl, write_job

pytestmark = pytest.mark.slow


def _attached_submit(gpuctl: Gpuctl, job_file: Path, log: Path) -> subprocess.Popen[bytes]:
    """`gpuctl submit JOB` in its own process group (the test's Ctrl-C reaches it alone)."""
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "submit", str(job_file)],
                                env=gpuctl.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip


def _until(what: str, found: Callable[[], Any], timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _running_job(gpuctl: Gpuctl) -> str | None:
    docs = json.loads(gpuctl.run("list", "-o", "json").stdout)
    return next((d["id"] for d in docs if d["state"] == "RUNNING"), None)


def _controller_pid(home: Path) -> int:
    """The live controller of ``home`` (local backend): the pid its lock file holds once the child
    has written its own (until then, the submit's), checked to be a `gpuctl controller run` process."""
    assert controller_running(home), "no controller runs"
    pid: int = _until("the controller's pid", lambda: _background_controller(home), timeout=60)
    return pid


def _background_controller(home: Path) -> int | None:
    pid = int((home / "controller.lock").read_text())
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return None
    return pid if cmdline[3:5] == [b"controller", b"run"] and b"--exit-when-idle" in cmdline else None


def _interrupt(gpuctl: Gpuctl, tmp_path: Path, name: str, steps: int, times: int) -> str:
    """Submit attached, press Ctrl-C ``times`` once the job runs; the job's id."""
    job_file = write_job(tmp_path, name, f"command: {TINY} {steps} 0.25\nresources: {{nodes: 1}}\n")
    log = tmp_path / f"{name}.out"
    submit = _attached_submit(gpuctl, job_file, log)
    try:
        job_id: str = _until("the job to run", lambda: _running_job(gpuctl))
        for _ in range(times):
            os.killpg(submit.pid, signal.SIGINT)
            time.sleep(0.05)
        assert submit.wait(timeout=60) == 130
    finally:
        if submit.poll() is None:
            submit.kill()
    said = log.read_text()
    assert "Traceback" not in said, said
    line = next(x for x in said.splitlines() if x.startswith("gpuctl: interrupted"))
    assert f"job {job_id} goes on under a background controller" in line
    for command in (f"`gpuctl logs {job_id} -f`", f"`gpuctl status {job_id}`", f"`gpuctl cancel {job_id}`"):
        assert command in line
    return job_id


def _wait_controller_gone(home: Path) -> None:
    _until("the background controller to leave", lambda: not controller_running(home), timeout=60)


def test_ctrl_c_leaves_the_job_to_a_background_controller(gpuctl: Gpuctl, tmp_path: Path) -> None:
    job_id = _interrupt(gpuctl, tmp_path, "interrupted", steps=40, times=1)
    pid = _controller_pid(gpuctl.home)
    assert gpuctl.status(job_id)["managed"] is True
    doc = gpuctl.wait_for(job_id, lambda d: d["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"))
    assert doc["state"] == "SUCCEEDED", doc
    assert doc["attempts"] == 1, "the running attempt went on: nothing was relaunched"
    _wait_controller_gone(gpuctl.home)  # it exits once no job is left
    _until("the controller process to end", lambda: not _alive(pid), timeout=60)


def _alive(pid: int) -> bool:
    try:
        return b" Z " not in Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1][:3]
    except FileNotFoundError:
        return False


def test_a_second_ctrl_c_and_a_killed_controller_never_hide_an_unmanaged_job(
    gpuctl: Gpuctl, tmp_path: Path
) -> None:
    job_id = _interrupt(gpuctl, tmp_path, "twice", steps=80, times=2)
    os.kill(_controller_pid(gpuctl.home), signal.SIGKILL)
    _until("the killed controller's lock to go", lambda: not controller_running(gpuctl.home), timeout=30)

    doc = gpuctl.status(job_id)
    assert doc["state"] == "RUNNING" and doc["managed"] is False
    status = gpuctl.run("status", job_id).stdout.splitlines()
    assert status[1].startswith("not managed: no gpuctl controller is running for it")
    listed = gpuctl.run("list", "-o", "wide")
    assert job_id in listed.stdout and "RUNNING (unmanaged)" in listed.stdout
    assert "To fix: start one: `gpuctl controller run --detach`" in listed.stderr

    started = gpuctl.run("controller", "run", "--detach")  # the fix it names
    assert "started in the background" in started.stdout
    doc = gpuctl.wait_for(job_id, lambda d: d["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"))
    assert doc["state"] == "SUCCEEDED" and doc["managed"] is None, doc
    _wait_controller_gone(gpuctl.home)
