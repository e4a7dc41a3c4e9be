"""The SLURM backend against a real cluster (two nodes on this host; these jobs use one) (slow: each job takes 10-40 s)."""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from orchestrator.backends.base import AttemptObservation, LaunchRequest, NodePhase
from orchestrator.backends.output_log import split_time
from orchestrator.backends.slurm import SlurmBackend, SlurmClusterConfig, commands, status_from_slurm
from orchestrator.backends.slurm.placements import request_for
from orchestrator.backends.slurm.time_limit import slurm_time_seconds
from orchestrator.errors import UserError
from orchestrator.spec import load_spec_text
from orchestrator.state.status import JobStatus
from orchestrator.times import iso_z
from tests.backends.slurm.conftest import ROOT, TRAIN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
EVERY = 5


def make_request(
    tmp_path: Path, config: SlurmClusterConfig, name: str, steps: int = 40, **extra: object
) -> LaunchRequest:
    doc: dict[str, object] = {
        "name": name,
        "command": [str(TRAIN), "--steps", str(steps), "--step-seconds", "0.1"],
        "resources": {"gpu_types": ["V100"], "gpus_per_node": 2},
        "checkpoint": {"every_steps": EVERY, "notice_grace_seconds": 20},
        **extra,
    }
    spec = load_spec_text(yaml.safe_dump(doc))
    return request_for(spec, f"{name}-t", tmp_path / name, config)


def wait_until(
    backend: SlurmBackend, req: LaunchRequest, done: object, timeout_s: float = 150
) -> AttemptObservation:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        obs = backend.observe(req.job_id, req.attempt, req.node_ids)
        if done(obs):  # type: ignore[operator]
            return obs
        time.sleep(0.5)
    raise AssertionError(f"timed out; last observation {obs}")


def finished(obs: AttemptObservation) -> bool:
    return obs.nodes[0].phase.ended and obs.nodes[0].phase is not NodePhase.PREEMPTED


def at_step(step: int) -> object:
    return lambda obs: obs.progress is not None and obs.progress.step >= step


def steps_by_attempt(req: LaunchRequest) -> collections.Counter[str]:
    lines = (Path(req.checkpoint_dir) / "steps.log").read_text().splitlines()
    return collections.Counter(line.split()[3] for line in lines)


def slurm_id(backend: SlurmBackend, req: LaunchRequest) -> int:
    job = backend.find(req.job_id, req.attempt)
    assert job is not None
    return job.job_id


def test_ddp_job_runs_to_completion(
    backend: SlurmBackend, cluster_config: SlurmClusterConfig, tmp_path: Path
) -> None:
    req = make_request(tmp_path, cluster_config, "ddp", steps=20)
    backend.launch(req)
    backend.launch(req)  # idempotent: still one SLURM job
    obs = wait_until(backend, req, finished)
    assert obs.nodes[0].phase is NodePhase.SUCCEEDED and obs.nodes[0].exit_code == 0
    assert obs.progress is not None and obs.progress.finished and obs.progress.step == 20
    assert len([j for j in backend.log_paths(req.job_id)]) == 1
    status = status_from_slurm(req.job_id, cluster_config)
    assert status.status is JobStatus.SUCCEEDED and status.attempts == 1
    [segment] = status.segments
    assert segment.gpus == 2 and segment.market == "spot" and segment.ended_at is not None
    assert segment.cost_usd(segment.ended_at) == pytest.approx(segment.hours(segment.ended_at) * 2.0)


def assert_resumed(req: LaunchRequest, total: int, max_lost: int) -> None:
    counts = steps_by_attempt(req)
    assert set(counts) == {"1", "2"}, counts
    assert total <= sum(counts.values()) <= total + max_lost, counts


def test_scontrol_requeue_resumes_from_checkpoint(
    backend: SlurmBackend, cluster_config: SlurmClusterConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    req = make_request(tmp_path, cluster_config, "requeue", steps=40)
    backend.launch(req)
    wait_until(backend, req, at_step(10))
    subprocess.run(["scontrol", "requeue", str(slurm_id(backend, req))], check=True)
    obs = wait_until(backend, req, finished)
    assert obs.nodes[0].phase is NodePhase.SUCCEEDED
    assert_resumed(req, 40, EVERY)
    assert status_from_slurm(req.job_id, cluster_config).attempts == 2

    # slurmdbd recorded both runs; once slurmctld forgets the job (MinJobAge), status reads them
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        rows = commands.accounting_jobs(f"gpuctl-{req.job_id}")
        if [r.state for r in rows] == ["REQUEUED", "COMPLETED"]:
            break
        time.sleep(0.5)
    assert [r.state for r in rows] == ["REQUEUED", "COMPLETED"]
    monkeypatch.setattr(commands, "list_jobs", lambda: [])
    recorded = status_from_slurm(req.job_id, cluster_config)
    assert recorded.status is JobStatus.SUCCEEDED and recorded.attempts == 2
    assert [s.attempt for s in recorded.segments] == [1, 2] and all(s.ended_at for s in recorded.segments)
    assert recorded.cost_usd(datetime.now(UTC)) > 0


def test_node_down_mid_run_resumes_from_checkpoint(
    backend: SlurmBackend, cluster_config: SlurmClusterConfig, tmp_path: Path
) -> None:
    req = make_request(tmp_path, cluster_config, "nodedown", steps=40)
    backend.launch(req)
    wait_until(backend, req, at_step(10))
    job = backend.find(req.job_id, req.attempt)
    assert job is not None
    node = job.nodes  # the one node it runs on
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=gpuctl-test"], check=True)
    time.sleep(1)
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=True)
    obs = wait_until(backend, req, finished)
    assert obs.nodes[0].phase is NodePhase.SUCCEEDED
    assert_resumed(req, 40, EVERY)
    status = status_from_slurm(req.job_id, cluster_config)
    assert status.attempts == 2 and len(status.segments) == 2


def test_notice_checkpoints_then_requeues_without_lost_steps(
    backend: SlurmBackend, cluster_config: SlurmClusterConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the nodes' output writer is this tree's
    req = make_request(tmp_path, cluster_config, "notice", steps=40)
    backend.launch(req)
    wait_until(backend, req, at_step(8))
    backend.notify(req.job_id, req.attempt)
    obs = wait_until(backend, req, finished)
    assert obs.nodes[0].phase is NodePhase.SUCCEEDED
    assert_resumed(req, 40, 0)
    log = Path(backend.log_paths(req.job_id)[0]).read_text()
    assert "checkpoint saved" in log and "requeueing job" in log
    # the nodes' lines are timed (the batch shell's own are not); the step's code still requeued it
    noticed = [split_time(line) for line in log.splitlines() if "checkpoint saved" in line]
    assert noticed and all(when is not None for when, _ in noticed), log


def test_stop_checkpoints_and_cancels(
    backend: SlurmBackend, cluster_config: SlurmClusterConfig, tmp_path: Path
) -> None:
    req = make_request(tmp_path, cluster_config, "stop", steps=400)
    backend.launch(req)
    wait_until(backend, req, at_step(5))
    # The controller calls stop on every tick for nodes it has ended; no call may wait out the grace.
    deadline = time.monotonic() + 120
    while True:
        started = time.monotonic()
        backend.stop(req.job_id, req.attempt, req.node_ids, grace_s=5)
        assert time.monotonic() - started < 5, "stop waited for the grace period inside a tick"
        obs = backend.observe(req.job_id, req.attempt, req.node_ids)
        if obs.nodes[0].phase.ended or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert obs.nodes[0].phase.ended, obs
    assert status_from_slurm(req.job_id, cluster_config).status.terminal
    assert (Path(req.checkpoint_dir) / "ckpt.pt").exists()
    assert "checkpoint saved" in backend.log_paths(req.job_id)[0].read_text()
    backend.stop(req.job_id, req.attempt, req.node_ids, grace_s=5)  # idempotent


def test_elastic_sbatch_job_runs_on_the_nodes_slurm_gives(
    backend: SlurmBackend, cluster_config: SlurmClusterConfig, tmp_path: Path
) -> None:
    req = make_request(
        tmp_path,
        cluster_config,
        "elastic",
        steps=10,
        resources={"gpu_types": ["V100"], "gpus_per_node": 2, "nodes": {"min": 1, "max": 2}},
    )
    assert "#SBATCH --nodes=1-2" in backend.render(req).script
    backend.launch(req)
    obs = wait_until(backend, req, finished)
    assert [n.phase for n in obs.nodes] == [NodePhase.SUCCEEDED, NodePhase.SUCCEEDED]
    job = backend.find(req.job_id)
    assert job is not None and job.node_count == 1  # SLURM gives MIN of MIN-MAX when nothing asks for more


def test_spec_values_reach_the_job_literally(
    backend: SlurmBackend, cluster_config: SlurmClusterConfig, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    evil = f"$(touch {marker}) `touch {marker}`; touch {marker} \"'\n"
    req = make_request(tmp_path, cluster_config, "inject", steps=2, env={"EVIL": evil})
    spec = req.spec.model_copy(
        update={"command": [*req.spec.command_argv, "--echo-env", "EVIL", "--echo-arg", evil]}
    )
    req = LaunchRequest(**{**req.__dict__, "spec": spec})
    backend.launch(req)
    obs = wait_until(backend, req, finished)
    assert obs.nodes[0].phase is NodePhase.SUCCEEDED
    echo = json.loads((Path(req.checkpoint_dir) / "echo.json").read_text())
    assert echo == {"env": evil, "arg": evil}
    assert not marker.exists()


def test_each_attempt_asks_slurm_for_the_time_left_to_the_deadline(
    backend: SlurmBackend, cluster_config: SlurmClusterConfig, tmp_path: Path
) -> None:
    """A retry 30 h into a 36 h deadline asks for 6 h; an absolute deadline counts the same way."""
    spec = make_request(tmp_path, cluster_config, "timeleft", steps=2).spec
    now = datetime.now(UTC)
    retry = dataclasses.replace(
        request_for(
            spec, "timeleft-t", tmp_path / "rel", cluster_config, attempt=2, now=now - timedelta(hours=30)
        ),
        deadline=now + timedelta(hours=6),  # "36h", resolved at admission 30 h ago
    )
    at = (now + timedelta(days=5)).replace(second=0, microsecond=0)
    absolute = load_spec_text(
        yaml.safe_dump({**spec.to_dict(), "name": "timeabs", "goals": {"deadline": iso_z(at)}})
    )
    limits = []
    for req in (retry, request_for(absolute, "timeabs-t", tmp_path / "abs", cluster_config, now=now)):
        backend.launch(req)
        shown = subprocess.run(["scontrol", "show", "job", "-o", str(slurm_id(backend, req))],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        found = re.search(r"TimeLimit=(\S+)", shown)
        limits.append(found.group(1) if found else shown)
        commands.cancel(slurm_id(backend, req))
    assert limits[0] == "06:00:00"
    left = slurm_time_seconds(limits[1])
    assert left is not None and (at - now).total_seconds() - 120 <= left <= (at - now).total_seconds() + 60


def test_unknown_gres_type_and_partition_are_clear_errors(slurm_cluster: Path, tmp_path: Path) -> None:
    bad_gres = SlurmBackend(SlurmClusterConfig(gres_types={"V100": "h100"}))
    with pytest.raises(UserError, match=r"GRES type 'h100'.*not offered") as err:
        bad_gres.launch(make_request(tmp_path, bad_gres.config, "badgres"))
    assert "fake" in err.value.message and "To fix" in err.value.message
    bad_partition = SlurmBackend(SlurmClusterConfig(gres_types={"V100": "fake"}, partitions={"spot": "nope"}))
    with pytest.raises(UserError, match=r"partition 'nope'.*does not exist"):
        bad_partition.launch(make_request(tmp_path, bad_partition.config, "badpart"))
    unchecked = SlurmBackend(
        SlurmClusterConfig(gres_types={"V100": "fake"}, partitions={"spot": "nope"}), preflight=False
    )
    with pytest.raises(UserError, match="partition does not exist"):
        unchecked.launch(make_request(tmp_path, unchecked.config, "badpart2"))
    assert backend_spot_capacity(slurm_cluster) >= 0


def backend_spot_capacity(conf: Path) -> int:
    backend = SlurmBackend(SlurmClusterConfig(partitions={"spot": "spot"}))
    capacity = backend.spot_capacity("any-job", "", datetime.now(UTC))
    assert capacity is not None
    return capacity
