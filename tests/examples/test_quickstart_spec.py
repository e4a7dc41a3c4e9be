"""The quickstart job.yaml validates and matches what train.py accepts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orchestrator.spec.loader import load_spec_file

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def test_quickstart_job_validates() -> None:
    spec = load_spec_file(QUICKSTART / "job.yaml")
    assert spec.name == "quickstart"
    assert spec.command_argv[0] == "train.py" and (QUICKSTART / "train.py").is_file()
    assert spec.resources.nodes == 2 and spec.resources.gpus_per_node == 1
    assert spec.checkpoint.every_steps and spec.policies.global_batch == 64


def test_train_script_cli() -> None:
    out = subprocess.run(
        [sys.executable, str(QUICKSTART / "train.py"), "--help"], capture_output=True, text=True, check=True
    ).stdout
    for flag in ("--steps", "--checkpoint-every", "--lr"):
        assert flag in out
