"""Local launch: a secret reference's value goes into the node processes' environment, read when the
attempt is launched; nothing starts when it cannot be read. (The node processes are not started:
``subprocess.Popen`` is replaced to capture what they would get.)"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, ClassVar

import pytest

from orchestrator.backends.base import LaunchRequest, Placement
from orchestrator.backends.local import backend as local
from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import UserError
from orchestrator.spec import load_spec_text
from orchestrator.state.store import JobStore

VALUE = "s3cr3t-VALUE-123"


class CapturedPopen:
    started: ClassVar[list[dict[str, str]]] = []

    def __init__(self, argv: list[str], **kwargs: Any) -> None:
        CapturedPopen.started.append(dict(kwargs["env"]))
        self.pid = 999_999


def request(tmp_path: Path, store: JobStore) -> LaunchRequest:
    spec = load_spec_text(
        f"name: t\ncommand: train.py\nworkdir: {tmp_path}\n"
        "env: {MODE: fast, HF_TOKEN: {secret: hf, key: token}, WANDB: {from_env: MY_WANDB}}\n"
    )
    job_dir = store.job_dir("t-1")
    placement = Placement("V100", MarketKind.SPOT, "aws", "us-east-1", "us-east-1a", "p3", 1, 1.0, 3.0, "t")
    return LaunchRequest(
        "t-1", 1, spec, placement, ["t-1-a1-n0", "t-1-a1-n1"], 2, 2, str(job_dir / "ckpt"), job_dir
    )


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobStore:
    home = tmp_path / "home"
    monkeypatch.setenv("GPUCTL_HOME", str(home))
    store = JobStore(home)
    (home / "secrets").mkdir()
    (home / "secrets" / "hf").write_text(f"token: {VALUE}\n")
    (home / "secrets" / "hf").chmod(0o600)
    monkeypatch.setenv("MY_WANDB", "wandb-from-env")
    monkeypatch.setattr(local.LocalBackend, "_ensure_rendezvous", lambda *_: 29400)
    monkeypatch.setattr(subprocess, "Popen", CapturedPopen)
    CapturedPopen.started = []
    return store


def test_the_nodes_get_the_values(tmp_path: Path, store: JobStore) -> None:
    local.LocalBackend(store).launch(request(tmp_path, store))
    assert len(CapturedPopen.started) == 2
    for env in CapturedPopen.started:
        assert (env["MODE"], env["HF_TOKEN"], env["WANDB"]) == ("fast", VALUE, "wandb-from-env")
    files = [p for p in store.home.rglob("*") if p.is_file() and p.name != "hf"]
    assert not any(VALUE.encode() in p.read_bytes() for p in files)


def test_a_missing_variable_starts_no_node(
    tmp_path: Path, store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MY_WANDB")
    with pytest.raises(UserError) as err:
        local.LocalBackend(store).launch(request(tmp_path, store))
    assert "MY_WANDB is not set in the environment of the gpuctl controller that launches the job" in str(
        err.value
    )
    assert CapturedPopen.started == []
