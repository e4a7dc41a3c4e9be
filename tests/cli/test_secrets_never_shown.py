"""A secret's value is never printed or stored: every artefact gpuctl writes or shows for a job with
secret references carries the reference, never the value (docs/secrets.md)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from orchestrator.backends.base import Placement
from orchestrator.backends.kubernetes import client as kube_client
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.manifests import build_pod
from orchestrator.catalog.offers import MarketKind
from orchestrator.cli import jobs_cmd
from orchestrator.cli.main import main
from orchestrator.spec import load_spec_file
from orchestrator.state.store import JobStore
from tests.notify.secret_values import MARK, SECRETS_FILES, leaks

VALUE = "s3cr3t-VALUE-123"
JOB = """name: secrets
command: train.py
resources: {gpu_types: [A100-80GB]}
env:
  MODE: fast
  HF_TOKEN: {secret: hf, key: token}
"""
FROM_ENV = "  WANDB_API_KEY: {from_env: MY_WANDB}\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A gpuctl home whose secrets file and environment hold VALUE."""
    home = tmp_path / "home"
    (home / "secrets").mkdir(parents=True)
    (home / "secrets" / "hf").write_text(f"token: {VALUE}\n")
    (home / "secrets" / "hf").chmod(0o600)
    monkeypatch.setenv("GPUCTL_HOME", str(home))
    monkeypatch.setenv("MY_WANDB", VALUE)
    (tmp_path / "slurm.yaml").write_text(yaml.safe_dump({"gres_types": {"A100-80GB": "a100"}}))
    (tmp_path / "job.yaml").write_text(JOB + FROM_ENV)
    (tmp_path / "kube-job.yaml").write_text(JOB)
    return home


def validate_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["validate", str(tmp_path / "job.yaml")]) == 0
    captured = capsys.readouterr()
    return captured.out + captured.err


def sbatch_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    job, config = tmp_path / "job.yaml", tmp_path / "slurm.yaml"
    assert main(["sbatch", str(job), "--dry-run", "--cluster-config", str(config)]) == 0
    captured = capsys.readouterr()
    return captured.out + captured.err


def stored_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """`gpuctl submit --detach` (the controller it would start is not started): the job row, and
    every byte of the database files."""
    assert main(["submit", str(tmp_path / "job.yaml"), "--detach"]) == 0
    capsys.readouterr()
    home = tmp_path / "home"
    (job,) = JobStore(home).list_jobs()
    with sqlite3.connect(home / "gpuctl.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(FULL)")
    files = b"".join(p.read_bytes() for p in home.glob("gpuctl.db*"))
    assert VALUE.encode() not in files
    return job.spec_json


def pod_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    spec = load_spec_file(tmp_path / "kube-job.yaml")
    placement = Placement(
        "A100-80GB", MarketKind.SPOT, "aws", "us-east-1", "us-east-1a", "p4de", 8, 3.0, 5.0, "t"
    )
    config = KubeConfig(gpu_products={"A100-80GB": ["NVIDIA-A100-SXM4-80GB"]})
    pod = build_pod(spec, placement, job="secrets", namespace="ml", attempt=1, node_index=0, config=config)
    kubernetes_validate.validate(pod, "1.33", strict=True)
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
    }
    assert env["MODE"] == {"name": "MODE", "value": "fast"}
    return yaml.safe_dump(pod)


def gpujob(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    return yaml.safe_dump(kube_client.gpujob_manifest(load_spec_file(tmp_path / "kube-job.yaml"), "ml"))


ARTEFACTS: dict[str, tuple[Callable[[Path, pytest.CaptureFixture[str]], str], list[str]]] = {
    "validate": (validate_output, ['"secret": "hf"', '"key": "token"', '"from_env": "MY_WANDB"']),
    "sbatch --dry-run": (
        sbatch_dry_run,
        [
            "# HF_TOKEN: secret 'hf', key 'token'",
            "# WANDB_API_KEY: variable $MY_WANDB",
            "--export=ALL",
            "export MODE=fast",
        ],
    ),
    "stored spec": (
        stored_job,
        ['"HF_TOKEN":{"secret":"hf","key":"token"}', '"WANDB_API_KEY":{"from_env":"MY_WANDB"}'],
    ),
    "pod": (pod_manifest, ["secretKeyRef"]),
    "GPUJob": (gpujob, ["HF_TOKEN:\n      key: token\n      secret: hf"]),
}


@pytest.mark.parametrize("artefact", list(ARTEFACTS))
def test_the_reference_is_shown_and_the_value_never(
    artefact: str, home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_cmd, "spawn_background_controller", lambda *_: 0)
    render, expected = ARTEFACTS[artefact]
    text = render(home.parent, capsys)
    assert VALUE not in text
    for part in expected:
        assert part in text, text


def test_validate_warns_of_plain_values_with_secret_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: a\ncommand: train.py\nenv: {HF_TOKEN: abc, MODE: fast}\n")
    assert main(["validate", str(job)]) == 0
    err = capsys.readouterr().err
    assert "env.HF_TOKEN looks like a secret" in err and "HF_TOKEN: {secret: NAME, key: KEY}" in err
    assert "MODE" not in err
    assert main(["validate", "-q", str(job)]) == 0
    assert capsys.readouterr() == ("", "")


def test_submit_refuses_a_secrets_file_others_can_read_before_storing(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = home / "secrets" / "hf"
    path.chmod(0o644)
    assert main(["submit", str(home.parent / "job.yaml"), "--detach"]) == 2
    err = capsys.readouterr().err
    assert "mode 0644" in err and f"To fix: `chmod 600 {path}`" in err and VALUE not in err
    assert JobStore(home).list_jobs() == []


def test_submit_refuses_a_missing_variable_before_storing(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MY_WANDB")
    assert main(["submit", str(home.parent / "job.yaml"), "--detach"]) == 2
    assert "MY_WANDB is not set in this shell's environment" in capsys.readouterr().err
    assert JobStore(home).list_jobs() == []


def test_kubernetes_refuses_from_env_before_creating_anything(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing may reach the cluster")

    monkeypatch.setattr(kube_client, "create_gpujob", never)
    monkeypatch.setattr(kube_client, "list_gpujobs", never)
    assert main(["submit", str(home.parent / "job.yaml"), "--backend", "kubernetes", "--detach"]) == 2
    err = capsys.readouterr().err
    assert "env.WANDB_API_KEY: {from_env: MY_WANDB} is not available on Kubernetes" in err
    assert 'kubectl create secret generic NAME --from-literal=KEY="$MY_WANDB"' in err and VALUE not in err


@pytest.mark.parametrize("content", SECRETS_FILES.values(), ids=list(SECRETS_FILES))
def test_a_secrets_file_that_cannot_be_read_shows_no_piece_of_it(
    content: str | bytes, home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_cmd, "spawn_background_controller", lambda *_: 0)
    monkeypatch.delenv("MY_WANDB")  # only the secrets file holds a value
    (home.parent / "job.yaml").write_text(JOB)
    path = home / "secrets" / "hf"
    path.write_bytes(content.replace(b"url", b"token") if isinstance(content, bytes)
                     else content.replace("url", "token").encode())  # fmt: skip
    main(["submit", str(home.parent / "job.yaml"), "--detach"])
    captured = capsys.readouterr()
    for value in (MARK, MARK[::-1]):
        assert not leaks(captured.out + captured.err, value), captured
