"""The controller on the local backend, for real: torchrun agents, a simulated spot market, kill -9."""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.contract import read_progress_records
from tests.controller.conftest import TINY, Gpuctl, write_job

pytestmark = pytest.mark.slow


def _progress_events(home: Path, job: str) -> list[dict[str, Any]]:
    return [dict(r.fields) for r in read_progress_records(home / "jobs" / job / "progress.jsonl")]


def _assert_consistent_segments(doc: dict[str, Any]) -> None:
    segments = doc["segments"]
    assert segments, doc
    for seg in segments:
        assert seg["ended_at"] is not None, f"open segment left behind: {seg}"
        assert seg["ended_at"] >= seg["started_at"]
    for before, after in itertools.pairwise(segments):
        assert datetime.fromisoformat(after["started_at"]) >= datetime.fromisoformat(before["ended_at"]), (
            segments
        )
    assert abs(doc["cost_usd"] - sum(s["cost_usd"] for s in segments)) < 1e-5


def test_preempted_job_resumes_and_finishes(gpuctl: Gpuctl, tmp_path: Path) -> None:
    job_file = write_job(tmp_path, "tiny", f"command: {TINY} 24 0.2\nresources: {{nodes: 2}}\n"
                         "checkpoint: {notice_grace_seconds: 5}\n")  # fmt: skip
    out = gpuctl.run("submit", str(job_file), "--preempt-at", "step:8", "--outage", "2s")
    assert "SUCCEEDED" in out.stdout
    doc = json.loads(gpuctl.run("list", "-o", "json").stdout)[0]
    assert doc["state"] == "SUCCEEDED" and doc["attempts"] == 2 and doc["preemptions"] == 1
    assert [s["end_reason"] for s in doc["segments"]] == ["preempted", "finished"]
    assert all(s["market"] == "spot" for s in doc["segments"])
    assert 0 < doc["cost_usd"] < doc["on_demand_equivalent_usd"]
    _assert_consistent_segments(doc)
    events = _progress_events(gpuctl.home, doc["id"])
    resumed = [e for e in events if e.get("event") == "resumed"]
    preempted = [e for e in events if e.get("event") == "preempted"]
    assert resumed[1]["step"] == preempted[0]["step"] > 0, "the second attempt resumes where the notice saved"


def test_elastic_job_shrinks_then_grows_back(gpuctl: Gpuctl, tmp_path: Path) -> None:
    job_file = write_job(tmp_path, "elastic", f"command: {TINY} 110 0.25\nresources: {{nodes: {{min: 1, max: 2}}}}\n"
                         "checkpoint: {notice_grace_seconds: 5}\n")  # fmt: skip
    gpuctl.run("submit", str(job_file), "--spot-schedule", "step:10=1,after:15s=inf")
    doc = json.loads(gpuctl.run("list", "-o", "json").stdout)[0]
    assert doc["state"] == "SUCCEEDED"
    assert [s["nodes"] for s in doc["segments"]] == [2, 1, 2]
    _assert_consistent_segments(doc)
    worlds = [
        e["world_size"] for e in _progress_events(gpuctl.home, doc["id"]) if e.get("event") == "resumed"
    ]
    assert worlds == [2, 1, 2], "kept training on one node, then grew back to two"


def test_failing_training_is_retried_then_fails(gpuctl: Gpuctl, tmp_path: Path) -> None:
    job_file = write_job(tmp_path, "crashy", f"command: {TINY} 20 0.1\nresources: {{nodes: 1}}\n"
                         "recovery: {max_restarts: 1}\nenv: {TINY_FAIL_AT_STEP: '3'}\n")  # fmt: skip
    out = gpuctl.run("submit", str(job_file), check=False)
    assert out.returncode == 1
    doc = json.loads(gpuctl.run("list", "-o", "json").stdout)[0]
    assert doc["state"] == "FAILED" and doc["failure_reason"] == "too_many_restarts"
    assert doc["restarts"] == 1 and doc["attempts"] == 2


def test_cancel_from_another_terminal(gpuctl: Gpuctl, tmp_path: Path) -> None:
    job_file = write_job(tmp_path, "long", f"command: {TINY} 400 0.2\nresources: {{nodes: 2}}\n")
    job_id = gpuctl.run("submit", str(job_file), "--detach").stdout.strip()
    gpuctl.wait_for(job_id, lambda d: d["state"] == "RUNNING")
    gpuctl.run("cancel", job_id)
    doc = gpuctl.wait_for(job_id, lambda d: d["state"] == "CANCELLED", timeout=60)
    _assert_consistent_segments(doc)
    _wait_no_node_processes(gpuctl.home / "jobs" / job_id)


def test_controller_killed_at_any_point_loses_nothing(gpuctl: Gpuctl, tmp_path: Path) -> None:
    """kill -9 the controller repeatedly through a run with preemptions; restart it each time."""
    # 60 steps: after the second preemption point (step 25) the job runs 7 s more, so a controller that is
    # down for a few seconds there still sees it (the simulated market only fires while a controller looks)
    job_file = write_job(tmp_path, "crashsafe", f"command: {TINY} 60 0.2\nresources: {{nodes: 2}}\n"
                         "checkpoint: {notice_grace_seconds: 4}\n")  # fmt: skip
    job_id = gpuctl.run("submit", str(job_file), "--detach", "--preempt-at", "step:8", "--preempt-at", "step:25",
                        "--outage", "3s").stdout.strip()  # fmt: skip
    for delay in (3.0, 6.5, 2.0, 9.0, 4.5):
        time.sleep(delay)
        _kill_controller(gpuctl.home)
        if gpuctl.status(job_id)["state"] in ("SUCCEEDED", "FAILED"):
            break
        gpuctl.popen("controller", "run", "--exit-when-idle")
    doc = gpuctl.wait_for(job_id, lambda d: d["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=300)
    assert doc["state"] == "SUCCEEDED", doc
    # On a busy machine the training may finish while the controller is down, before the market's
    # second reclaim fires: then the reclaim is moot and there is one preemption, not two. Either way
    # every attempt was started once, on two nodes, and each has its one segment.
    assert 1 <= doc["preemptions"] <= 2 and doc["attempts"] == doc["preemptions"] + 1, doc
    _assert_consistent_segments(doc)
    assert len(doc["segments"]) == doc["attempts"]
    job_dir = gpuctl.home / "jobs" / job_id
    launches = {p.parent.name: p.read_text().split() for p in job_dir.glob("attempt-*/*/launches.log")}
    assert len(launches) == 2 * doc["attempts"], launches
    assert all(len(pids) == 1 for pids in launches.values()), launches
    finished = [e for e in _progress_events(gpuctl.home, job_id) if e.get("event") == "finished"]
    assert len(finished) == 1


def _kill_controller(home: Path) -> None:
    try:
        pid = int((home / "controller.lock").read_text())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(50):  # the lock is released when the process is really gone
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def _wait_no_node_processes(job_dir: Path, timeout: float = 45) -> None:
    """No process of the job is left: runners, agents, workers (found by their GPUCTL_JOB_ID), and the
    rendezvous store (found by the job folder on its command line)."""
    marker = f"GPUCTL_JOB_ID={job_dir.name}".encode()
    folder = str(job_dir).encode()
    deadline = time.monotonic() + timeout
    alive: list[int] = []
    while time.monotonic() < deadline:
        alive = []
        for proc in Path("/proc").iterdir():
            try:
                ours = proc.name.isdigit() and (
                    marker in (proc / "environ").read_bytes().split(b"\0")
                    or any(arg.startswith(folder) for arg in (proc / "cmdline").read_bytes().split(b"\0"))
                )
                if ours and (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(int(proc.name))
            except OSError:
                continue
        if not alive:
            return
        time.sleep(0.5)
    raise AssertionError(f"processes of {job_dir.name} still running: {alive}")


def test_a_rank_hung_in_a_collective_is_detected_and_the_job_restarted(
    gpuctl: Gpuctl, tmp_path: Path
) -> None:
    """gloo on CPU under torchrun: the last rank stops before step 6's all-reduce, the other waits in it.
    The watchdog sees the step counter stop, raises ``stalled`` within stall_after (plus a tick or two)
    and restarts the job from its checkpoint; the second attempt finishes."""
    job_file = write_job(tmp_path, "hang", f"command: {TINY} 20 0.1\nresources: {{nodes: 2}}\n"
                         "env: {TINY_HANG_AT_STEP: '5'}\ncheckpoint: {notice_grace_seconds: 3}\n"
                         "watchdog: {stall_after: 6s, action: restart}\n")  # fmt: skip
    gpuctl.run("submit", str(job_file))
    doc = json.loads(gpuctl.run("list", "-o", "json").stdout)[0]
    assert doc["state"] == "SUCCEEDED", doc["message"]
    assert (doc["attempts"], doc["restarts"]) == (2, 1)
    events = json.loads(gpuctl.run("events", doc["id"], "-o", "json").stdout)
    stalled = [e for e in events if e["kind"] == "stalled"]
    assert len(stalled) == 1 and "step 5 has not advanced" in stalled[0]["message"], stalled
    steps = [e for e in _progress_events(gpuctl.home, doc["id"]) if e.get("step") == 5 and "event" not in e]
    hung_at = datetime.fromisoformat(steps[0]["time"])
    waited = (datetime.fromisoformat(stalled[0]["time"]) - hung_at).total_seconds()
    assert 5.0 <= waited <= 12.0, waited  # stall_after (event times in whole seconds), plus ticks
    assert any("watchdog: step 5" in e["message"] for e in events if e["kind"] == "transition")
