"""A real local job with secret references: the training process gets the values (it prints their
hashes); nothing gpuctl wrote in its home holds them, nor does anything it printed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.controller.conftest import Gpuctl, write_job

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parent / "fixtures" / "secret_hash.py"
VALUE = "s3cr3t-VALUE-123"
FROM_ENV_VALUE = "s3cr3t-FROM-ENV-456"


def test_the_training_process_gets_the_values_and_nothing_stores_them(gpuctl: Gpuctl, tmp_path: Path) -> None:
    secrets = gpuctl.home / "secrets"
    secrets.mkdir(parents=True)
    (secrets / "hf").write_text(f"token: {VALUE}\n")
    (secrets / "hf").chmod(0o600)
    gpuctl.env["MY_WANDB"] = FROM_ENV_VALUE
    job_file = write_job(
        tmp_path, "secret-run", f"command: {SCRIPT} HF_TOKEN WANDB_API_KEY\n"
        "env: {HF_TOKEN: {secret: hf, key: token}, WANDB_API_KEY: {from_env: MY_WANDB}}\n",
    )  # fmt: skip
    done = gpuctl.run("submit", str(job_file))
    logs = gpuctl.run("logs", "secret-run").stdout
    assert f"HF_TOKEN sha256={hashlib.sha256(VALUE.encode()).hexdigest()}" in logs, logs
    assert f"WANDB_API_KEY sha256={hashlib.sha256(FROM_ENV_VALUE.encode()).hexdigest()}" in logs, logs
    printed = done.stdout + done.stderr + logs + gpuctl.run("status", "secret-run", "-o", "json").stdout
    written = [p for p in gpuctl.home.rglob("*") if p.is_file() and p.parent != secrets]
    for value in (VALUE, FROM_ENV_VALUE):
        assert value not in printed
        assert [p for p in written if value.encode() in p.read_bytes()] == []
