"""`gpuctl validate` refuses what `gpuctl submit` refuses before anything is stored (the same admission:
GPU types and offers, prices, budgets; not what needs the backend), and reads GPUJob manifests."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.cli.main import main
from tests.cli.test_submit_refusals import JOB, _slurm_cluster
from tests.controller.test_admission import OVER_BUDGET_JOB

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kubernetes" / "gpujob.yaml"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("GPUCTL_HOME", str(folder))
    return folder


def with_line(text: str, line: str) -> str:
    key = line.split(":", 1)[0]
    return "\n".join(x for x in text.splitlines() if not x.startswith(key + ":")) + "\n" + line + "\n"


@pytest.mark.parametrize(
    ("extra", "config", "expected"),
    [
        ("resources: {gpu_types: [Z900]}", None, "unknown GPU type 'Z900'"),
        ("market: {mode: on-demand, zones: [nowhere-9z]}", None, "no offer of H100 in nowhere-9z"),
        ("goals: {budget_usd: 100, compute_hours: 10}", None, "above its budget_usd $100.00"),
        ("market: {mode: on-demand, max_hourly_usd: 20}", None, "above its max_hourly_usd $20.00/h"),
        (
            "",
            "budgets: {teams: {default: 50}}\n",
            "team 'default' has $50.00 left of its $50.00 monthly budget",
        ),
        ("team: Research", "budgets: {teams: {research: 5000}}\n", "team 'Research' is not 'research'"),
    ],
)
def test_validate_refuses_what_submit_refuses(
    tmp_path: Path,
    home: Path,
    capsys: pytest.CaptureFixture[str],
    extra: str,
    config: str | None,
    expected: str,
) -> None:
    if config:
        (home / "config.yaml").write_text(config)
    job = tmp_path / "job.yaml"
    job.write_text(with_line(JOB, extra) if extra else JOB)
    said = []
    for command in ("validate", "submit"):
        assert main([command, str(job)]) == 2
        err = capsys.readouterr().err
        assert expected in err and "To fix" in err, (command, err)
        said.append(err)
    assert said[0] == said[1]


def test_budgets_are_checked_only_when_the_config_has_them(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB)  # 4 x 8 H100 on-demand: far above 50 USD an hour
    assert main(["validate", "-q", str(job)]) == 0
    (home / "config.yaml").write_text("reports: {folder: /tmp}\n")
    assert main(["validate", "-q", str(job)]) == 0
    (home / "config.yaml").write_text("budgets: {teams: {default: 50}}\n")
    assert main(["validate", "-q", str(job)]) == 2
    assert "monthly budget" in capsys.readouterr().err


def test_slurm_prices_come_from_the_cluster_config_and_the_cluster_is_not_asked(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    reached: list[str] = []
    config = _slurm_cluster(tmp_path, monkeypatch, reached)
    job = tmp_path / "job.yaml"
    job.write_text(OVER_BUDGET_JOB)
    assert main(["validate", str(job), "--backend", "slurm", "--cluster-config", str(config)]) == 2
    assert "job 'capped' would cost $20.00/h" in capsys.readouterr().err
    job.write_text(OVER_BUDGET_JOB.replace("max_hourly_usd: 1", "max_hourly_usd: 20"))
    assert main(["validate", "-q", str(job), "--backend", "slurm", "--cluster-config", str(config)]) == 0
    assert reached == []  # sinfo is submit's preflight


def test_validate_reads_the_shipped_gpujob_manifest(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    captured = capsys.readouterr()
    heads = [line for line in captured.out.splitlines() if line.startswith(str(EXAMPLE))]
    assert heads == [
        f"{EXAMPLE}: document 1: valid GPUJob 'llama-finetune' (job spec 'llama-finetune')",
        f"{EXAMPLE}: document 2: valid GPUJob 'quickstart' (job spec 'quickstart')",
    ]
    assert "unknown field" not in captured.err and "checked at submission only" in captured.err


def test_a_gpujob_is_admitted_as_the_operator_admits_it(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    for doc in docs:  # the namespace comes from --namespace
        doc["metadata"].pop("namespace")
    docs[1]["spec"]["resources"]["gpu_types"] = ["Z900"]
    manifest = tmp_path / "gpujobs.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    assert main(["validate", str(manifest), "--namespace", "ml"]) == 2
    err = capsys.readouterr().err
    assert f"{manifest} document 2 (GPUJob quickstart): unknown GPU type 'Z900'" in err, err
    (home / "config.yaml").write_text(
        "budgets: {teams: {research: 1000000, ml: 1000000}, namespace_teams: {ml: [research, ml]}}\n"
    )
    docs[1]["spec"]["resources"]["gpu_types"] = ["L4"]
    docs[1]["spec"]["team"] = "research"
    manifest.write_text(yaml.safe_dump_all(docs))
    assert main(["validate", "-q", str(manifest), "--namespace", "ml"]) == 0
    assert main(["validate", "-q", str(manifest), "--namespace", "other"]) == 2
    assert "may not be charged from namespace 'other'" in capsys.readouterr().err
    assert main(["validate", str(manifest), "--backend", "slurm"]) == 2
    assert "is a GPUJob, which runs on Kubernetes" in capsys.readouterr().err


def test_a_gpujob_with_from_env_is_refused_as_the_operator_refuses_it(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    docs[0]["spec"]["env"] = {"WANDB_API_KEY": {"from_env": "WANDB_API_KEY"}}
    manifest = tmp_path / "gpujobs.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    assert main(["validate", str(manifest)]) == 2
    assert "env.WANDB_API_KEY" in capsys.readouterr().err
