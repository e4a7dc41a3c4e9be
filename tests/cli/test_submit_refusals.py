"""`gpuctl submit` refuses a job that cannot fit its caps or budgets, before anything is stored."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.backends.slurm import commands as slurm_commands
from orchestrator.backends.slurm.config import CONFIG_ENV as SLURM_CONFIG_ENV
from orchestrator.cli.main import main
from orchestrator.errors import UserError
from orchestrator.policies.market import POLICIES
from orchestrator.state.store import JobStore
from tests.controller.test_admission import OVER_BUDGET_JOB, SLURM_CONFIG

JOB = """name: big
command: train.py
resources: {gpu_types: [H100], gpus_per_node: 8, nodes: 4}
market: {mode: on-demand}
"""


@pytest.mark.parametrize(
    ("extra", "config", "expected"),
    [
        ("goals: {budget_usd: 100, compute_hours: 10}\n", None, "above its budget_usd $100.00"),
        ("market: {mode: on-demand, max_hourly_usd: 20}\n", None, "above its max_hourly_usd $20.00/h"),
        (
            "",
            "budgets: {teams: {default: 50}}\n",
            "team 'default' has $50.00 left of its $50.00 monthly budget",
        ),
        ("resources: {gpu_types: [Z900]}\n", None, "unknown GPU type 'Z900'"),
    ],
)
def test_refused_with_the_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    extra: str, config: str | None, expected: str,
) -> None:  # fmt: skip
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("GPUCTL_HOME", str(home))
    if config:
        (home / "config.yaml").write_text(config)
    text = JOB
    for line in extra.splitlines():  # a later key of the same name replaces the earlier one
        key = line.split(":", 1)[0]
        text = "\n".join(x for x in text.splitlines() if not x.startswith(key + ":")) + "\n" + line + "\n"
    job = tmp_path / "job.yaml"
    job.write_text(text)
    assert main(["submit", str(job)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "To fix" in err, err
    assert JobStore(home).list_jobs() == []


def _slurm_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reached: list[str]) -> Path:
    """A SLURM cluster config (SLURM_CONFIG's partitions and prices); asking the cluster itself (the
    preflight's sinfo) is recorded in ``reached`` and ends the submission there."""
    config = tmp_path / "slurm.yaml"
    config.write_text(yaml.safe_dump(SLURM_CONFIG.model_dump(mode="json")))
    monkeypatch.setenv(SLURM_CONFIG_ENV, str(config))  # restored after the test (submit sets it too)

    def no_cluster() -> list[str]:
        reached.append("sinfo")
        raise UserError("the preflight asked the cluster", "nothing: this test has no cluster")

    monkeypatch.setattr(slurm_commands, "partitions", no_cluster)
    return config


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_the_over_budget_job_is_refused_before_anything_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    """The job every backend refuses (tests/controller/test_admission.py); SLURM's prices come from the
    cluster config alone: the cluster is never asked about a refused job."""
    home = tmp_path / "home"
    monkeypatch.setenv("GPUCTL_HOME", str(home))
    reached: list[str] = []
    config = _slurm_cluster(tmp_path, monkeypatch, reached)
    job = tmp_path / "job.yaml"
    job.write_text(OVER_BUDGET_JOB)
    assert main(["submit", str(job), "--backend", backend, "--cluster-config", str(config)]) == 2
    err = capsys.readouterr().err
    price = "$20.00/h" if backend == "slurm" else "/h, above its max_hourly_usd $1.00/h"
    assert "job 'capped' would cost $" in err and price in err and "To fix" in err, err
    assert JobStore(home).list_jobs() == [] and reached == []

    if backend == "slurm":  # admitted: the preflight comes next, still before anything is stored
        job.write_text(OVER_BUDGET_JOB.replace("max_hourly_usd: 1", "max_hourly_usd: 20"))
        assert main(["submit", str(job), "--backend", "slurm"]) == 2
        assert "the preflight asked the cluster" in capsys.readouterr().err
        assert reached == ["sinfo"] and JobStore(home).list_jobs() == []


def test_unknown_market_policy_is_refused_by_validate_and_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("GPUCTL_HOME", str(home))
    job = tmp_path / "job.yaml"
    job.write_text("name: p\ncommand: train.py\nmarket: {policy: nope}\n")
    for command in (["validate", str(job)], ["submit", str(job)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "unknown market policy 'nope'" in err and "To fix: use one of " + ", ".join(POLICIES) in err
    assert JobStore(home).list_jobs() == []
    job.write_text(f"name: p\ncommand: train.py\nmarket: {{policy: {next(iter(POLICIES))}}}\n")
    assert main(["validate", "-q", str(job)]) == 0
