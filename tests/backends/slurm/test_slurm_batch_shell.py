"""The generated batch shell's signal handling, run by bash with stub srun/scancel/scontrol."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.backends.monitoring import MonitorSettings
from orchestrator.backends.output_log import split_time
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
    config: SlurmClusterConfig | None = None,
    spec_extra: dict[str, object] | None = None,
) -> tuple[int, list[str]]:
    """The batch shell's exit code and the stub calls it made; its output is in ``tmp_path/output``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {**STUBS, **(stubs or {})}.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    config = config or SlurmClusterConfig()
    spec = load_spec_text(yaml.safe_dump({"name": "t", "command": "train.py", "workdir": str(tmp_path),
                                          **(spec_extra or {})}))  # fmt: skip
    request = request_for(spec, "t-1", tmp_path / "job", config)
    request.job_dir.mkdir()
    monitor = MonitorSettings(source="off", command=(sys.executable, "-m", "orchestrator.monitor"))
    script = render_batch_job(request, config, monitor, requeue_on_notice=requeue_on_notice).script
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
        "SLURMD_NODENAME": "node1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),  # the output writer's gpuctl
    }
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    (tmp_path / "output").write_text(done.stdout + done.stderr)
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


PASS_THROUGH_SRUN = 'while [[ $1 == --* ]]; do shift; done; exec "$@"'
"""srun on one node: runs its task (the node's wrapper with the launcher) as slurmstepd would."""


@pytest.mark.parametrize(
    ("launcher_rc", "requeue_on_notice", "expected_calls", "exit_code"),
    [
        (0, True, [], 0),
        (3, True, [], 3),
        (75, True, ["scontrol requeue 42"], 0),  # the preempted code by itself: a notice
        (75, False, [], 75),  # under the controller: the next attempt
    ],
)
def test_each_nodes_setup_and_launcher_output_is_timed_and_the_launchers_code_decides(
    tmp_path: Path, launcher_rc: int, requeue_on_notice: bool, expected_calls: list[str], exit_code: int
) -> None:
    """Issue 32, item 4: the step's code is the launcher's, through the node wrapper's timed output."""
    config = SlurmClusterConfig(
        launcher=["bash", "-c", f'echo "trained on $SLURMD_NODENAME"; exit {launcher_rc}', "x"]
    )
    setup = """echo 'set up: "$HOME" `id`'"""
    code, calls = run_batch(
        tmp_path, "", 0, requeue_on_notice, {"srun": PASS_THROUGH_SRUN}, config, {"setup": setup}
    )
    assert (code, calls) == (exit_code, expected_calls)
    timed = [text for when, text in map(split_time, (tmp_path / "output").read_text().splitlines()) if when]
    assert timed == ['set up: "$HOME" `id`', "trained on node1"]
