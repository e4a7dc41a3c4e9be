"""Secret references on SLURM: the values go to sbatch in its environment and reach the tasks; the
script carries only the references. Run with a stub ``sbatch`` that executes the script at once in
its own environment (what ``--export=ALL`` does), and stub ``srun``/``scontrol``."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from orchestrator.backends.slurm import SlurmBackend, SlurmClusterConfig, commands
from orchestrator.backends.slurm.placements import request_for
from orchestrator.errors import UserError
from orchestrator.spec import load_spec_text

VALUE = "s3cr3t-VALUE-123"
STUBS = {
    # sbatch: keep the script and the arguments, then run the script in sbatch's own environment
    # (optionally without HF_TOKEN: a site whose sbatch exports nothing).
    "sbatch": 'cat >"$OUT/script"; echo "$*" >"$OUT/args"; '
    '${DROP:+env -u HF_TOKEN} bash "$OUT/script" >"$OUT/batch.out" 2>&1; echo $? >"$OUT/rc"; echo 42',
    # srun: the "task" records what it received (a hash of it, as a training script would check).
    "srun": 'printf %s "${HF_TOKEN:-unset}" | sha256sum >>"$OUT/task"; echo "$WANDB" >>"$OUT/task"',
    "scontrol": "echo node1",
    "scancel": "true",
}


def stub_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    out.mkdir()
    for name, body in STUBS.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("OUT", str(out))
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node1")
    monkeypatch.setattr(commands, "list_jobs", lambda: [])
    home = tmp_path / "home"
    (home / "secrets").mkdir(parents=True)
    (home / "secrets" / "hf").write_text(f"token: {VALUE}\n")
    (home / "secrets" / "hf").chmod(0o600)
    monkeypatch.setenv("GPUCTL_HOME", str(home))
    monkeypatch.setenv("MY_WANDB", "wandb-from-env")
    return out


def launch(tmp_path: Path) -> None:
    spec = load_spec_text(
        f"name: t\ncommand: train.py\nworkdir: {tmp_path}\n"
        "env: {HF_TOKEN: {secret: hf, key: token}, WANDB: {from_env: MY_WANDB}}\n"
    )
    request = request_for(spec, "t-1", tmp_path / "job", SlurmClusterConfig())
    SlurmBackend(SlurmClusterConfig(), preflight=False).launch(request)


def test_the_value_reaches_the_task_through_sbatchs_environment_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = stub_cluster(tmp_path, monkeypatch)
    launch(tmp_path)
    assert (out / "rc").read_text().strip() == "0", (out / "batch.out").read_text()
    digest = hashlib.sha256(VALUE.encode()).hexdigest()
    assert (out / "task").read_text().split() == [digest, "-", "wandb-from-env"]
    script = (out / "script").read_text()
    assert VALUE not in script and "wandb-from-env" not in script
    assert "# HF_TOKEN: secret 'hf', key 'token'" in script
    assert "--export=ALL" in (out / "args").read_text()
    assert not any(
        VALUE in p.read_text(errors="replace") for p in (tmp_path / "job").rglob("*") if p.is_file()
    )


def test_a_value_that_does_not_arrive_fails_the_batch_script_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = stub_cluster(tmp_path, monkeypatch)
    monkeypatch.setenv("DROP", "1")
    launch(tmp_path)
    assert (out / "rc").read_text().strip() == "1"
    assert (
        "gpuctl: HF_TOKEN (secret 'hf', key 'token') did not reach the job" in (out / "batch.out").read_text()
    )
    assert not (out / "task").exists()


def test_an_unreadable_secret_submits_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = stub_cluster(tmp_path, monkeypatch)
    (tmp_path / "home" / "secrets" / "hf").chmod(0o644)
    with pytest.raises(UserError, match="chmod 600"):
        launch(tmp_path)
    assert not (out / "script").exists()
