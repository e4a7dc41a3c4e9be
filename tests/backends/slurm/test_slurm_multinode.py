"""Jobs on two SLURM nodes of the dev cluster, under the controller (`gpuctl submit --backend slurm`).

Both nodes (dev1, dev2) are slurmd daemons on this host (scripts/slurm-dev-cluster.sh): one torchrun
agent per node, c10d rendezvous across them. Every wait is on a condition (job store, SLURM), never a
fixed sleep.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import yaml

from orchestrator.backends.slurm import SlurmBackend, SlurmClusterConfig, status_from_slurm
from orchestrator.backends.slurm import commands as slurm
from orchestrator.backends.slurm.placements import request_for
from orchestrator.spec.loader import load_spec_file
from orchestrator.state.records import JobRecord
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from tests.backends.slurm.conftest import TRAIN
from tests.backends.slurm.test_slurm_controller import ended, events, gpuctl, slurm_jobs, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
EVERY = 5
TWO_NODES = {"gpu_types": ["V100"], "gpus_per_node": 2, "nodes": 2}
ELASTIC = {"gpu_types": ["V100"], "gpus_per_node": 2, "nodes": {"min": 1, "max": 2}}


def job_file(tmp_path: Path, name: str, steps: int, seed: int | None = None, **extra: object) -> Path:
    command = [str(TRAIN), "--steps", str(steps), "--step-seconds", "0.2"]
    if seed is not None:
        command += ["--seed", str(seed)]
    doc: dict[str, object] = {
        "name": name,
        "command": command,
        "resources": TWO_NODES,
        "checkpoint": {"every_steps": EVERY, "notice_grace_seconds": 20},
        **extra,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def submit(env: dict[str, str], path: Path) -> str:
    done = gpuctl(env, "submit", str(path), "--backend", "slurm", "--detach")
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[0]


def steps_log(env: dict[str, str], job_id: str) -> list[tuple[int, str, int]]:
    """(step, attempt, world size) per step rank 0 ran, in order."""
    path = JobStore(Path(env["GPUCTL_HOME"])).job_dir(job_id) / "checkpoints" / "steps.log"
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(int(r[1]), r[3], int(r[5]) if len(r) > 5 else 0) for r in rows]


def at_step(step: int, attempt: int = 1) -> Callable[[JobStore, JobRecord], bool]:
    def check(store: JobStore, job: JobRecord) -> bool:
        return job.attempts == attempt and any(
            a == str(attempt) and s >= step for s, a, _ in steps_log({"GPUCTL_HOME": str(store.home)}, job.id)
        )

    return check


def hostnames(nodelist: str) -> list[str]:
    out = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
    )
    return out.stdout.split()


@pytest.fixture
def resume_nodes() -> Iterator[list[str]]:
    """Nodes a test took down; put back in service whatever happens."""
    downed: list[str] = []
    yield downed
    for node in downed:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)


def take_down(node: str, downed: list[str]) -> None:
    downed.append(node)
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=gpuctl-test"], check=True)


def wait_node_state(node: str, state: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%t"], capture_output=True, text=True)
        if out.stdout.split() and out.stdout.split()[0] == state:
            return
        time.sleep(0.5)
    raise AssertionError(f"node {node} did not become {state}: {out.stdout}")


def test_two_node_ddp_matches_the_local_backend_bit_for_bit(
    gpuctl_env: dict[str, str], tmp_path: Path
) -> None:
    path = job_file(tmp_path, "ddp2", steps=20, seed=7)
    job_id = submit(gpuctl_env, path)
    job = wait_for(gpuctl_env, job_id, ended(JobStatus.SUCCEEDED), timeout_s=200)
    store = JobStore(Path(gpuctl_env["GPUCTL_HOME"]))
    assert job.attempts == 1
    [run] = slurm_jobs(job_id)
    assert run.node_count == 2 and hostnames(run.nodes) == ["dev1", "dev2"] and run.state == "COMPLETED"
    assert {w for _, _, w in steps_log(gpuctl_env, job_id)} == {4}  # 2 nodes x 2 GPUs in one world
    [segment] = store.segments(job_id)  # the ledger bills both nodes
    assert segment.nodes == 2 and segment.node_price_usd_per_hour == 2.0 and segment.ended_at is not None
    assert segment.cost_usd(segment.ended_at) == pytest.approx(segment.hours(segment.ended_at) * 2 * 2.0)

    local_env = {**gpuctl_env, "GPUCTL_HOME": str(tmp_path / "local-home")}
    done = gpuctl(local_env, "submit", str(path), "--backend", "local")
    assert done.returncode == 0 and "SUCCEEDED" in done.stdout, done.stdout + done.stderr
    [local_job] = JobStore(tmp_path / "local-home").list_jobs()
    slurm_ckpt = torch.load(store.job_dir(job_id) / "checkpoints" / "ckpt.pt")
    local_ckpt = torch.load(tmp_path / "local-home" / "jobs" / local_job.id / "checkpoints" / "ckpt.pt")
    assert slurm_ckpt["step"] == local_ckpt["step"] == 20
    for key, tensor in local_ckpt["model"].items():
        assert torch.equal(slurm_ckpt["model"][key], tensor), key


def test_a_node_down_mid_run_resumes_a_job_from_its_checkpoint(
    gpuctl_env: dict[str, str], tmp_path: Path, resume_nodes: list[str]
) -> None:
    steps = 60
    job_id = submit(gpuctl_env, job_file(tmp_path, "down2", steps=steps))
    wait_for(gpuctl_env, job_id, at_step(12))
    take_down(hostnames(slurm_jobs(job_id)[0].nodes)[-1], resume_nodes)
    wait_for(gpuctl_env, job_id, lambda store, job: job.preemptions == 1)  # the attempt ended with the node
    subprocess.run(["scontrol", "update", f"NodeName={resume_nodes[-1]}", "State=RESUME"], check=True)
    job = wait_for(gpuctl_env, job_id, ended(JobStatus.SUCCEEDED), timeout_s=240)
    assert job.attempts == 2 and job.preemptions == 1
    counts = collections.Counter(a for _, a, _ in steps_log(gpuctl_env, job_id))
    assert set(counts) == {"1", "2"} and steps <= counts.total() <= steps + EVERY, counts
    store = JobStore(Path(gpuctl_env["GPUCTL_HOME"]))
    assert [(s.nodes, s.end_reason) for s in store.segments(job_id)] == [(2, "preempted"), (2, "finished")]


def test_an_elastic_job_shrinks_to_the_survivor_and_grows_back(
    gpuctl_env: dict[str, str], tmp_path: Path, resume_nodes: list[str]
) -> None:
    path = job_file(
        tmp_path, "elastic2", steps=70, resources=ELASTIC, policies={"rescale": True}, market={"mode": "spot"}
    )
    job_id = submit(gpuctl_env, path)
    wait_for(gpuctl_env, job_id, at_step(10))
    take_down(hostnames(slurm_jobs(job_id)[0].nodes)[-1], resume_nodes)
    store = JobStore(Path(gpuctl_env["GPUCTL_HOME"]))
    # the survivor trains on alone, in the same attempt and SLURM job: world size 2 (1 node x 2 GPUs)
    wait_for(gpuctl_env, job_id, lambda s, job: any(w == 2 for _, _, w in steps_log(gpuctl_env, job_id)))
    assert len(slurm_jobs(job_id)) == 1 and store.job(job_id).attempts == 1
    subprocess.run(["scontrol", "update", f"NodeName={resume_nodes[-1]}", "State=RESUME"], check=True)
    job = wait_for(gpuctl_env, job_id, ended(JobStatus.SUCCEEDED), timeout_s=240)
    worlds = [w for _, _, w in steps_log(gpuctl_env, job_id)]
    assert [w for i, w in enumerate(worlds) if i == 0 or worlds[i - 1] != w] == [4, 2, 4], worlds
    assert job.attempts == 2  # growing back: a checkpoint, then a new 2-node attempt
    assert [s.nodes for s in store.segments(job_id)] == [2, 1, 2]
    first, second = slurm_jobs(job_id)
    assert first.node_count == 1 and second.node_count == 2  # SLURM took the lost node out of the job
    assert "continuing on 1" in events(store, job_id)


def test_partition_preemption_checkpoints_in_the_grace_and_loses_no_step(
    gpuctl_env: dict[str, str], tmp_path: Path
) -> None:
    steps = 50
    job_id = submit(gpuctl_env, job_file(tmp_path, "preempt2", steps=steps, market={"mode": "spot"}))
    wait_for(gpuctl_env, job_id, at_step(10))
    urgent = subprocess.run(
        ["sbatch", "--parsable", "--partition=urgent", "--nodes=2", "--gres=gpu:fake:4",
         f"--output={tmp_path}/urgent.out", "--wrap=sleep 5"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    job = wait_for(gpuctl_env, job_id, ended(JobStatus.SUCCEEDED), timeout_s=240)
    assert job.preemptions == 1 and job.attempts == 2
    counts = collections.Counter(a for _, a, _ in steps_log(gpuctl_env, job_id))
    assert set(counts) == {"1", "2"} and counts.total() == steps, counts  # 0 steps lost
    urgent_job = slurm.show_job(int(urgent))
    runs = slurm_jobs(job_id)
    assert urgent_job is not None and urgent_job.start_time is not None
    assert runs[1].start_time is not None and runs[1].start_time >= urgent_job.start_time

    store = JobStore(Path(gpuctl_env["GPUCTL_HOME"]))
    segments = store.segments(job_id)
    deadline = time.monotonic() + 30  # slurmdbd records the runs a moment after slurmctld
    while time.monotonic() < deadline:
        rows = [r for r in slurm.accounting_jobs(f"gpuctl-{job_id}") if r.start_time is not None]
        if len(rows) >= 2 and rows[-1].state == "COMPLETED":
            break
        time.sleep(0.5)
    assert [(s.nodes, s.zone, s.end_reason) for s in segments] == [
        (2, "spot", "preempted"),
        (2, "spot", "finished"),
    ]
    assert [(r.node_count, r.partition) for r in rows] == [(2, "spot"), (2, "spot")], rows
    assert rows[-1].state == "COMPLETED"
    for segment, row in zip(segments, rows, strict=True):  # the ledger's segments are SLURM's runs
        assert row.start_time is not None
        assert abs((segment.started_at - row.start_time).total_seconds()) <= 5


def test_a_controller_killed_during_a_two_node_attempt_never_submits_twice(
    gpuctl_env: dict[str, str], tmp_path: Path
) -> None:
    steps = 40
    job_id = submit(gpuctl_env, job_file(tmp_path, "crash2", steps=steps))
    wait_for(gpuctl_env, job_id, at_step(5))
    lock = Path(gpuctl_env["GPUCTL_HOME"]) / "controller-slurm.lock"
    pid = int(lock.read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    replacement = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "controller", "run", "--backend", "slurm", "--exit-when-idle"],
        env=gpuctl_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        job = wait_for(gpuctl_env, job_id, ended(JobStatus.SUCCEEDED), timeout_s=200)
    finally:
        replacement.kill()
        replacement.wait()
    assert job.attempts == 1
    [run] = slurm_jobs(job_id)
    assert run.node_count == 2 and run.state == "COMPLETED"
    assert collections.Counter(a for _, a, _ in steps_log(gpuctl_env, job_id)) == {"1": steps}
    [segment] = JobStore(Path(gpuctl_env["GPUCTL_HOME"])).segments(job_id)
    assert segment.nodes == 2 and segment.end_reason == "finished"


def test_gpuctl_sbatch_runs_two_nodes_and_slurm_requeue_resumes_a_preempted_job(
    slurm_cluster: Path, cluster_config: SlurmClusterConfig, tmp_path: Path
) -> None:
    """Without the controller (`gpuctl sbatch`): partition preemption is SLURM's own requeue."""
    backend = SlurmBackend(cluster_config)
    steps = 50
    spec = load_spec_file(job_file(tmp_path, "sbatch2", steps=steps, market={"mode": "spot"}))
    req = request_for(spec, "sbatch2-t", tmp_path / "sbatch2", cluster_config)
    backend.launch(req)
    log = Path(req.checkpoint_dir) / "steps.log"

    def rows() -> list[list[str]]:
        return [line.split() for line in log.read_text().splitlines()] if log.exists() else []

    deadline = time.monotonic() + 150
    while not any(int(r[1]) >= 10 for r in rows()) and time.monotonic() < deadline:
        time.sleep(0.5)
    subprocess.run(
        ["sbatch", "--partition=urgent", "--nodes=2", "--gres=gpu:fake:4", f"--output={tmp_path}/urgent.out",
         "--wrap=sleep 3"],
        capture_output=True, check=True,
    )  # fmt: skip
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline:
        job = backend.find(req.job_id)
        if job is not None and job.finished:
            break
        time.sleep(0.5)
    assert job is not None and job.state == "COMPLETED" and job.node_count == 2 and job.restarts == 1
    counts = collections.Counter(r[3] for r in rows())
    assert set(counts) == {"1", "2"} and counts.total() == steps, counts  # 0 steps lost
    assert {int(r[5]) for r in rows()} == {4}
    status = status_from_slurm(req.job_id, cluster_config)
    assert status.status is JobStatus.SUCCEEDED and status.attempts == 2
    assert [s.gpus for s in status.segments] == [4, 4]
