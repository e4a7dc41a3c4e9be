"""`gpuctl submit --backend slurm` on the real dev cluster: the controller owns recovery.

Each test submits through the CLI with ``--detach``, so a real background controller
(``gpuctl controller run --backend slurm``) drives the job, and the test reads the job store and
SLURM. The cluster has two nodes and partitions over both: ``spot`` (1 USD per GPU-hour), ``ondemand``
(3 USD) and ``urgent`` (preempts spot). The multi-node tests are in test_slurm_multinode.py.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from orchestrator.backends.slurm import SlurmBackend
from orchestrator.backends.slurm import commands as slurm
from orchestrator.state.records import JobRecord
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from tests.backends.slurm.conftest import ROOT, TRAIN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
EVERY = 5


def gpuctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def submit(env: dict[str, str], tmp_path: Path, name: str, steps: int, **extra: object) -> str:
    doc: dict[str, object] = {
        "name": name,
        "command": [str(TRAIN), "--steps", str(steps), "--step-seconds", "0.2"],
        "resources": {"gpu_types": ["V100"], "gpus_per_node": 2},
        "checkpoint": {"every_steps": EVERY, "notice_grace_seconds": 20},
        **extra,
    }
    job_file = tmp_path / f"{name}.yaml"
    job_file.write_text(yaml.safe_dump(doc))
    done = gpuctl(env, "submit", str(job_file), "--backend", "slurm", "--detach")
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[0]


def wait_for(
    env: dict[str, str], job_id: str, done: Callable[[JobStore, JobRecord], bool], timeout_s: float = 200
) -> JobRecord:
    store = JobStore(Path(env["GPUCTL_HOME"]))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = store.job(job_id)
        if done(store, job):
            return job
        if job.status.terminal:
            raise AssertionError(f"job ended {job.status}: {job.message}\n{events(store, job_id)}")
        time.sleep(0.5)
    raise AssertionError(
        f"timed out in {job.status}: {job.message}\n{events(store, job_id)}\n{diagnostics(store, job_id)}"
    )


def diagnostics(store: JobStore, job_id: str) -> str:
    """The tails of what the controller, the batch shells and the training printed: why a wait timed out."""
    paths = [store.home / "controller-slurm.log", *sorted(store.job_dir(job_id).glob("slurm-attempt-*.out"))]
    paths.append(store.job_dir(job_id) / "checkpoints" / "steps.log")
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in paths if p.exists())


def events(store: JobStore, job_id: str) -> str:
    return "\n".join(f"{e.kind}: {e.message}" for e in store.events(job_id))


def ended(status: JobStatus) -> Callable[[JobStore, JobRecord], bool]:
    return lambda store, job: job.status is status


def at_step(step: int, attempt: int = 1) -> Callable[[JobStore, JobRecord], bool]:
    def check(store: JobStore, job: JobRecord) -> bool:
        lines = _steps(store, job.id)
        return job.attempts == attempt and any(a == str(attempt) and s >= step for s, a in lines)

    return check


def _steps(store: JobStore, job_id: str) -> list[tuple[int, str]]:
    path = store.job_dir(job_id) / "checkpoints" / "steps.log"
    if not path.exists():
        return []
    return [(int(parts[1]), parts[3]) for parts in (line.split() for line in path.read_text().splitlines())]


def steps_by_attempt(env: dict[str, str], job_id: str) -> collections.Counter[str]:
    return collections.Counter(a for _, a in _steps(JobStore(Path(env["GPUCTL_HOME"])), job_id))


def slurm_jobs(job_id: str) -> list[slurm.SlurmJob]:
    return sorted((j for j in slurm.list_jobs() if j.name == f"gpuctl-{job_id}"), key=lambda j: j.job_id)


def test_ddp_job_runs_to_completion_with_ledger_and_stateless_status(
    gpuctl_env: dict[str, str], tmp_path: Path
) -> None:
    # Another user's job holds every GPU of both nodes for a while: ours waits in the queue first.
    blocker = [
        "sbatch",
        "--partition=spot",
        "--nodes=2",
        "--gres=gpu:fake:4",
        f"--output={tmp_path}/blocker.out",
        "--wrap=sleep 8",
    ]
    subprocess.run(blocker, check=True, capture_output=True)
    job_id = submit(gpuctl_env, tmp_path, "ddp", steps=20)
    job = wait_for(gpuctl_env, job_id, ended(JobStatus.SUCCEEDED), timeout_s=150)
    store = JobStore(Path(gpuctl_env["GPUCTL_HOME"]))
    assert job.attempts == 1 and job.preemptions == 0
    assert "RUNNING" in events(store, job_id)  # the progress file reached the controller
    [segment] = store.segments(job_id)
    assert (segment.market, segment.zone, segment.nodes) == ("spot", "spot", 1)
    assert segment.node_price_usd_per_hour == 2.0 and segment.on_demand_node_price_usd_per_hour == 6.0
    assert segment.ended_at is not None
    assert steps_by_attempt(gpuctl_env, job_id) == {"1": 20}
    [run] = slurm_jobs(job_id)
    assert run.state == "COMPLETED" and run.partition == "spot" and run.gres.endswith("gpu:fake:2")
    assert run.start_time is not None  # queue time is not billed: the segment starts with the job
    assert (run.start_time - job.submitted_at).total_seconds() >= 4  # it did queue
    assert abs((segment.started_at - run.start_time).total_seconds()) <= 3

    status = gpuctl(gpuctl_env, "status", job_id, "--backend", "slurm", "-o", "json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["state"] == "SUCCEEDED" and doc["attempts"] == 1
    assert doc["backend_details"]["slurm_job_id"] == run.job_id
    assert [(s["market"], s["attempt"]) for s in doc["segments"]] == [("spot", 1)]
    text = gpuctl(gpuctl_env, "status", job_id, "--backend", "slurm").stdout
    assert text.startswith(f"job {job_id} SUCCEEDED") and f"SLURM job {run.job_id}" in text


def test_requeue_and_node_down_each_start_the_next_attempt_from_the_checkpoint(
    gpuctl_env: dict[str, str], tmp_path: Path
) -> None:
    steps = 80
    job_id = submit(gpuctl_env, tmp_path, "requeue", steps=steps)
    wait_for(gpuctl_env, job_id, at_step(10, attempt=1))
    [first] = slurm_jobs(job_id)
    subprocess.run(["scontrol", "requeue", str(first.job_id)], check=True)

    wait_for(gpuctl_env, job_id, at_step(35, attempt=2))
    node = slurm_jobs(job_id)[-1].nodes  # the one node attempt 2 runs on
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=gpuctl-test"], check=True)
    time.sleep(1)
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=True)

    job = wait_for(gpuctl_env, job_id, ended(JobStatus.SUCCEEDED))
    assert job.attempts == 3 and job.preemptions == 2
    counts = steps_by_attempt(gpuctl_env, job_id)
    assert set(counts) == {"1", "2", "3"}, counts
    assert steps <= sum(counts.values()) <= steps + 2 * EVERY, counts  # at most one interval lost each
    runs = slurm_jobs(job_id)
    assert len(runs) == 3 and runs[0].state == "CANCELLED"  # the requeued run never ran beside attempt 2
    store = JobStore(Path(gpuctl_env["GPUCTL_HOME"]))
    assert [s.end_reason for s in store.segments(job_id)] == ["preempted", "preempted", "finished"]


def test_notice_with_spot_down_moves_the_job_to_on_demand(gpuctl_env: dict[str, str], tmp_path: Path) -> None:
    steps = 50
    gpuctl_env["PYTHONPATH"] = str(ROOT)  # the nodes' output writer is this tree's (sbatch passes it on)
    job_id = submit(
        gpuctl_env, tmp_path, "fallback", steps=steps,
        goals={"deadline": "100s", "compute_hours": 0.02},
        market={"mode": "spot-with-fallback", "policy": "greedy", "changeover": "10s"},
    )  # fmt: skip
    wait_for(gpuctl_env, job_id, at_step(10, attempt=1))
    subprocess.run(["scontrol", "update", "PartitionName=spot", "State=DOWN"], check=True)
    try:
        SlurmBackend(controller_owned=True).notify(job_id, 1)  # USR1 to the batch shell
        job = wait_for(gpuctl_env, job_id, ended(JobStatus.SUCCEEDED))
    finally:
        subprocess.run(["scontrol", "update", "PartitionName=spot", "State=UP"], check=True)
    assert job.attempts == 2 and job.preemptions == 1
    assert steps_by_attempt(gpuctl_env, job_id).total() == steps  # the notice checkpoint lost nothing
    store = JobStore(Path(gpuctl_env["GPUCTL_HOME"]))
    spot, on_demand = store.segments(job_id)
    assert (spot.market, spot.zone, spot.node_price_usd_per_hour) == ("spot", "spot", 2.0)
    assert (on_demand.market, on_demand.zone, on_demand.node_price_usd_per_hour) == (
        "on-demand",
        "ondemand",
        6.0,
    )
    assert [r.partition for r in slurm_jobs(job_id)] == ["spot", "ondemand"]
    assert "on-demand: the deadline needs it" in events(store, job_id)
    assert_logs_timed_and_the_notice_folded(gpuctl_env, job_id)


def assert_logs_timed_and_the_notice_folded(env: dict[str, str], job_id: str) -> None:
    """Issue 32, item 4: each node's lines are timed by the node's writer, the torchrun agent's
    traceback for the notice is one line (``--raw`` shows it), ``--attempt`` picks an attempt."""
    shown = gpuctl(env, "logs", job_id)
    assert shown.returncode == 0, shown.stderr
    timed = re.compile(
        r"\[attempt-1\] \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ rank 0: notice at step \d+, checkpoint saved$"
    )
    assert any(timed.match(line) for line in shown.stdout.splitlines()), shown.stdout
    assert any(line.startswith("[attempt-2] 20") for line in shown.stdout.splitlines()), shown.stdout
    assert "SignalException" not in shown.stdout and "gpuctl: torchrun agent (pid " in shown.stdout, (
        shown.stdout
    )
    raw = gpuctl(env, "logs", job_id, "--raw", "--attempt", "1")
    assert "Traceback (most recent call last):" in raw.stdout and "SignalException" in raw.stdout
    assert all(line.startswith("[attempt-1] ") for line in raw.stdout.splitlines())
    bare = gpuctl(env, "logs", job_id, "--attempt", "2", "--no-timestamps", "--tail", "3")
    assert bare.returncode == 0 and len(bare.stdout.splitlines()) == 3, bare.stdout
    assert not any(re.match(r"\[attempt-2\] \d{4}-", line) for line in bare.stdout.splitlines()), bare.stdout


def test_cancel_checkpoints_and_cancels_the_slurm_job(gpuctl_env: dict[str, str], tmp_path: Path) -> None:
    job_id = submit(gpuctl_env, tmp_path, "cancel", steps=2000)
    wait_for(gpuctl_env, job_id, at_step(7, attempt=1))
    done = gpuctl(gpuctl_env, "cancel", job_id)
    assert done.returncode == 0, done.stderr
    wait_for(gpuctl_env, job_id, ended(JobStatus.CANCELLED), timeout_s=90)
    store = JobStore(Path(gpuctl_env["GPUCTL_HOME"]))
    assert (store.job_dir(job_id) / "checkpoints" / "ckpt.pt").exists()
    deadline = time.monotonic() + 30
    while slurm_jobs(job_id)[0].state != "CANCELLED" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert slurm_jobs(job_id)[0].state == "CANCELLED"
    assert "CANCELLED" in gpuctl(gpuctl_env, "status", job_id, "--backend", "slurm").stdout


def test_submit_refuses_a_partition_the_cluster_lacks(gpuctl_env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad-cluster.yaml"
    bad.write_text(yaml.safe_dump({"gres_types": {"V100": "fake"}, "partitions": {"spot": "nope"}}))
    job_file = tmp_path / "bad.yaml"
    job_file.write_text(
        yaml.safe_dump({"name": "bad", "command": [str(TRAIN)], "resources": {"gpu_types": ["V100"]}})
    )
    done = gpuctl(
        gpuctl_env, "submit", str(job_file), "--backend", "slurm", "--detach", "--cluster-config", str(bad)
    )
    assert done.returncode != 0
    assert "partition 'nope'" in done.stderr and "To fix" in done.stderr
    assert JobStore(Path(gpuctl_env["GPUCTL_HOME"])).list_jobs() == []


def test_a_killed_controller_is_replaced_without_a_second_sbatch(
    gpuctl_env: dict[str, str], tmp_path: Path
) -> None:
    job_id = submit(gpuctl_env, tmp_path, "crash", steps=40)
    wait_for(gpuctl_env, job_id, at_step(5, attempt=1))
    lock = Path(gpuctl_env["GPUCTL_HOME"]) / "controller-slurm.lock"
    os.kill(int(lock.read_text()), signal.SIGKILL)
    time.sleep(2)
    replacement = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "controller", "run", "--backend", "slurm", "--exit-when-idle"],
        env=gpuctl_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        job = wait_for(gpuctl_env, job_id, ended(JobStatus.SUCCEEDED), timeout_s=150)
    finally:
        replacement.kill()
        replacement.wait()
    assert job.attempts == 1 and len(slurm_jobs(job_id)) == 1
    assert steps_by_attempt(gpuctl_env, job_id) == {"1": 40}
