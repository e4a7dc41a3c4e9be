"""Parsing captured SLURM 22.05 outputs (and the newer --json shape) into gpuctl states."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.backends.base import NodePhase
from orchestrator.backends.progress import read_progress
from orchestrator.backends.slurm import commands
from orchestrator.backends.slurm.backend import attempt_of, gpu_type_of
from orchestrator.backends.slurm.commands import slurm_error
from orchestrator.backends.slurm.parse import (
    SlurmJob,
    json_errors,
    map_state,
    parse_sacct,
    parse_scontrol_job,
    parse_scontrol_pairs,
    parse_squeue_json,
)
from orchestrator.backends.slurm.status import parse_runs
from orchestrator.errors import EnvironmentProblem, TemporaryError, UserError
from orchestrator.state.status import FailureReason, JobStatus

DATA = Path(__file__).parent / "data"


def test_squeue_json_2205_completed_failed_cancelled() -> None:
    jobs = {j.job_id: j for j in parse_squeue_json((DATA / "squeue-22.05.json").read_text())}
    done, failed, cancelled = jobs[4], jobs[7], jobs[8]
    assert (done.state, done.restarts, done.exit_code, done.comment) == ("COMPLETED", 1, 0, "gpuctl:sj2:1")
    assert done.gres == "gres:gpu:fake:2" and done.gpus_per_node == 2 and done.gres_type == "fake"
    assert done.stdout == "/tmp/sj2/slurm-attempt-1.out" and done.finished
    assert (done.user_id, done.user_name) == (0, "root")
    assert done.start_time is not None and done.end_time is not None and done.start_time < done.end_time
    assert (failed.state, failed.exit_code, failed.exit_signal) == ("FAILED", 3, None)
    assert (cancelled.state, cancelled.exit_signal) == ("CANCELLED", 15)
    assert attempt_of(done) == 1 and attempt_of(failed) is None and gpu_type_of(done) is None
    assert gpu_type_of(replace(done, comment="gpuctl:sj2:1:A100-80GB")) == "A100-80GB"


def test_squeue_json_requeued_after_node_down_is_recovering() -> None:
    [job] = parse_squeue_json((DATA / "squeue-22.05-node-down.json").read_text())
    assert (job.state, job.reason, job.restarts) == ("PENDING", "BeginTime", 1)
    mapping = map_state(job)
    assert mapping.status is JobStatus.RECOVERING and mapping.phase is NodePhase.STARTING


def test_squeue_json_newer_shape() -> None:
    text = json.dumps(
        {
            "errors": [],
            "jobs": [
                {
                    "job_id": 9,
                    "name": "gpuctl-x",
                    "job_state": ["OUT_OF_MEMORY"],
                    "restart_cnt": {"set": True, "number": 2},
                    "start_time": {"set": True, "infinite": False, "number": 1700000000},
                    "end_time": {"set": False, "number": 0},
                    "exit_code": {
                        "status": ["FAILED"],
                        "return_code": {"set": True, "number": 0},
                        "signal": {"id": {"set": True, "number": 9}},
                    },
                    "tres_per_node": "gres/gpu:a100:4",
                }
            ],
        }
    )
    [job] = parse_squeue_json(text)
    assert job.state == "OUT_OF_MEMORY" and job.restarts == 2 and job.end_time is None
    assert job.start_time == datetime.fromtimestamp(1700000000, UTC)
    assert (job.exit_code, job.exit_signal) == (0, 9)
    assert job.gpus_per_node == 4 and job.gres_type == "a100"
    assert map_state(job).status is JobStatus.FAILED and "out of memory" in map_state(job).message


def test_json_errors_are_reported() -> None:
    error = {"description": "Failed while looking for jobs", "source": "slurm_load_jobs"}
    text = json.dumps({"errors": [error], "jobs": []})
    assert json_errors(text) == ["slurm_load_jobs: Failed while looking for jobs"]


def test_scontrol_show_job_lines() -> None:
    failed = parse_scontrol_job((DATA / "scontrol-failed.txt").read_text())
    assert failed.state == "FAILED" and failed.exit_code == 3 and failed.end_time is not None
    done = parse_scontrol_job((DATA / "scontrol-completed.txt").read_text())
    assert done.name == "gpuctl-sj2" and done.restarts == 1 and done.node_count == 1 and done.nodes
    assert done.gpus_per_node == 2 and done.stdout.endswith("slurm-attempt-1.out")
    requeued = parse_scontrol_job((DATA / "scontrol-requeued.txt").read_text())
    assert requeued.state == "COMPLETING" and requeued.restarts == 1


def test_scontrol_pairs_keep_values_with_spaces() -> None:
    pairs = parse_scontrol_pairs("JobId=3 Comment=a b c WorkDir=/x y NtasksPerN:B:S:C=0:0:*:*")
    assert pairs == {"JobId": "3", "Comment": "a b c", "WorkDir": "/x y", "NtasksPerN:B:S:C": "0:0:*:*"}


def job(state: str, restarts: int = 0, exit_code: int | None = None, reason: str = "None") -> SlurmJob:
    return SlurmJob(
        1, "gpuctl-a", state, reason, restarts, "spot", 1, "n1", None, None, None, exit_code, None
    )


@pytest.mark.parametrize(
    ("state", "status", "phase", "failure"),
    [
        ("PENDING", JobStatus.LAUNCHING, NodePhase.STARTING, None),
        ("RUNNING", JobStatus.RUNNING, NodePhase.RUNNING, None),
        ("COMPLETED", JobStatus.SUCCEEDED, NodePhase.SUCCEEDED, None),
        ("FAILED", JobStatus.FAILED, NodePhase.FAILED, FailureReason.USER_CODE_ERROR),
        ("PREEMPTED", JobStatus.PREEMPTED, NodePhase.PREEMPTED, None),
        ("REQUEUED", JobStatus.RECOVERING, NodePhase.PREEMPTED, None),
        ("NODE_FAIL", JobStatus.FAILED, NodePhase.LOST, FailureReason.BACKEND_ERROR),
        ("TIMEOUT", JobStatus.FAILED, NodePhase.FAILED, FailureReason.BACKEND_ERROR),
        ("OUT_OF_MEMORY", JobStatus.FAILED, NodePhase.FAILED, FailureReason.USER_CODE_ERROR),
        ("CANCELLED", JobStatus.CANCELLED, NodePhase.LOST, None),
    ],
)
def test_state_mapping(
    state: str, status: JobStatus, phase: NodePhase, failure: FailureReason | None
) -> None:
    mapping = map_state(job(state))
    assert (mapping.status, mapping.phase, mapping.failure) == (status, phase, failure)
    assert state in mapping.message


def test_failed_message_names_exit_code_and_pending_reason() -> None:
    assert "exit code 3" in map_state(job("FAILED", exit_code=3)).message
    assert "(QOSMaxJobsPerUserLimit)" in map_state(job("PENDING", reason="QOSMaxJobsPerUserLimit")).message


def test_runs_log_each_requeue_is_a_segment() -> None:
    runs = parse_runs(
        "start 4 0 100 1 vm\nend 4 0 110 1 requeue\nstart 4 1 120 2 vm[1-2]\nstart 4 2 200 1 vm\ngarbage\n"
    )
    assert [(r.restart, r.nodes) for r in runs] == [(0, 1), (1, 2), (2, 1)]
    assert runs[0].ended_at == datetime.fromtimestamp(110, UTC)
    assert runs[1].ended_at == datetime.fromtimestamp(200, UTC)  # killed: ends when the next run starts
    assert runs[2].ended_at is None


def test_progress_file_newest_complete_line(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    path.write_text(
        '{"step": 3, "loss": 0.5}\n{"step": 4, "event": "finished", "metrics": {"acc": 0.9}}\n{"st'
    )
    progress = read_progress(path)
    assert (
        progress is not None and progress.step == 4 and progress.finished and progress.metrics == {"acc": 0.9}
    )
    assert read_progress(tmp_path / "missing") is None


def test_error_messages_map_to_gpuctl_errors() -> None:
    unreachable = slurm_error(
        ["sbatch"], "sbatch: error: Batch job submission failed: Unable to contact slurm controller"
    )
    assert isinstance(unreachable, TemporaryError) and "slurmctld is unreachable" in str(unreachable)
    partition = slurm_error(
        ["sbatch"], "sbatch: error: Batch job submission failed: Invalid partition name specified"
    )
    assert isinstance(partition, UserError) and "To fix" in str(partition)
    gres = slurm_error(["sbatch"], "sbatch: error: Invalid generic resource (gres) specification")
    assert isinstance(gres, UserError) and "gres_types" in str(gres)
    noconf = slurm_error(["squeue"], "squeue: fatal: Could not establish a configuration source")
    assert isinstance(noconf, EnvironmentProblem) and "SLURM_CONF" in str(noconf)


def local_time(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def test_sacct_rows_are_runs_and_a_requeue_counts_restarts() -> None:
    requeued, completed, failed = parse_sacct((DATA / "sacct-22.05.txt").read_text())
    assert (requeued.job_id, requeued.state, requeued.restarts) == (2, "REQUEUED", 0)
    assert (completed.job_id, completed.state, completed.restarts) == (2, "COMPLETED", 1)
    assert completed.start_time == local_time("2026-11-23T13:42:25")
    assert completed.end_time == local_time("2026-11-23T13:42:28")
    assert completed.gres == "gpu:fake:2" and completed.gpus_per_node == 2 and completed.gres_type == "fake"
    assert completed.stdout == "/tmp/devc/slurm-attempt-2.out"  # the WorkDir is the job folder
    assert (completed.user_id, completed.user_name) == (0, "root")
    assert attempt_of(failed) == 3 and (failed.state, failed.exit_code) == ("FAILED", 3)
    assert map_state(failed).phase is NodePhase.FAILED


def test_sacct_without_accounting_storage_means_no_records(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "run_slurm", lambda argv: "Slurm accounting storage is disabled\n")
    assert commands.accounting_jobs("gpuctl-x") == []
