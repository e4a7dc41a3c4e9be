"""The generated batch shell's signal handling, run by bash with stub srun/scancel/scontrol."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from orchestrator.backends.slurm import SlurmClusterConfig, render_batch_job
from orchestrator.backends.slurm import script as batch_script
from orchestrator.backends.slurm.placements import request_for
from orchestrator.spec import load_spec_text

STUBS = {
    # srun: optionally signal the batch shell (its parent), then exit like the training step would.
    "srun": '[ -n "${SEND:-}" ] && kill -s "$SEND" $PPID; sleep 0.5; exit "${STEP_RC:-0}"',
    "scancel": 'echo "scancel $*" >>"$CALLS"',
    "scontrol": '[ "$1" = show ] && { echo node1; exit 0; }; echo "scontrol $*" >>"$CALLS"',
}


def run_batch(
    tmp_path: Path,
    send: str,
    step_rc: int,
    requeue_on_notice: bool = True,
    stubs: dict[str, str] | None = None,
) -> tuple[int, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {**STUBS, **(stubs or {})}.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    spec = load_spec_text(f"name: t\ncommand: train.py\nworkdir: {tmp_path}\n")
    request = request_for(spec, "t-1", tmp_path / "job", SlurmClusterConfig())
    request.job_dir.mkdir()
    script = render_batch_job(request, SlurmClusterConfig(), requeue_on_notice=requeue_on_notice).script
    calls = tmp_path / "calls"
    calls.touch()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SEND": send,
        "STEP_RC": str(step_rc),
        "CALLS": str(calls),
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_NODELIST": "node1",
    }
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    return done.returncode, calls.read_text().splitlines()


@pytest.mark.parametrize(
    ("send", "step_rc", "expected_calls", "exit_code"),
    [
        ("", 0, [], 0),
        ("", 3, [], 3),
        ("", 75, ["scontrol requeue 42"], 0),
        ("USR1", 1, ["scancel --signal=TERM 42", "scontrol requeue 42"], 0),
        ("USR1", 0, ["scancel --signal=TERM 42"], 0),  # finished meanwhile: no requeue
        ("USR2", 1, ["scancel --signal=TERM 42", "scancel 42"], 1),
        ("USR2", 75, ["scancel --signal=TERM 42", "scancel 42"], 75),
        ("TERM", 1, ["scancel --signal=TERM 42"], 1),  # scancel or SLURM preemption: no self-cancel
        ("TERM", 75, ["scancel --signal=TERM 42"], 75),
    ],
)
def test_batch_shell_signals(
    tmp_path: Path, send: str, step_rc: int, expected_calls: list[str], exit_code: int
) -> None:
    code, calls = run_batch(tmp_path, send, step_rc)
    assert calls == expected_calls
    assert code == exit_code
    runs = (tmp_path / "job" / "slurm-runs.log").read_text().split()
    assert runs[:2] == ["start", "42"] and "end" in runs


@pytest.mark.parametrize(
    ("send", "step_rc", "expected_calls", "exit_code"),
    [
        ("", 75, [], 75),  # the monitor's notice file: the controller places the next attempt
        ("USR1", 75, ["scancel --signal=TERM 42"], 75),
        ("USR1", 1, ["scancel --signal=TERM 42"], 75),  # torchrun's code: the notice decides
        ("USR1", 0, ["scancel --signal=TERM 42"], 0),
        ("", 1, [], 1),
        ("USR2", 75, ["scancel --signal=TERM 42", "scancel 42"], 75),
    ],
)
def test_under_the_controller_a_notice_ends_the_job_with_the_preempted_code(
    tmp_path: Path, send: str, step_rc: int, expected_calls: list[str], exit_code: int
) -> None:
    code, calls = run_batch(tmp_path, send, step_rc, requeue_on_notice=False)
    assert calls == expected_calls
    assert code == exit_code


def test_a_step_still_running_after_training_finished_is_ended_and_the_run_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker hung at exit or torchrun's exit barrier can hold an agent after the training finished:
    the batch shell ends the step LINGER_AFTER_FINISHED_S after the run's ``finished`` record instead
    of billing the wait."""
    monkeypatch.setattr(batch_script, "LINGER_AFTER_FINISHED_S", 1)
    hanging_step = (
        'echo $$ >"$CALLS.srun"; echo \'{"event": "finished", "step": 9}\' >>"$GPUCTL_PROGRESS_FILE"; '
        "exec sleep 300"
    )
    kill_step = 'echo "scancel $*" >>"$CALLS"; [ "$1" = --signal=KILL ] && kill -KILL "$(cat "$CALLS.srun")"'
    rc, calls = run_batch(tmp_path, "", 0, stubs={"srun": hanging_step, "scancel": kill_step})
    assert (rc, calls) == (0, ["scancel --signal=KILL 42"])
