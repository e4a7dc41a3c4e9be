"""The quickstart through `gpuctl submit` on the local backend: exact resume and elastic rescale."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.contract import read_progress_records
from orchestrator.runtime import CheckpointStore, LocalStorage
from tests.controller.conftest import Gpuctl

pytestmark = pytest.mark.slow
QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def _job(
    tmp_path: Path, name: str, extra: str = "", nodes: str = "2", steps: int = 80, grace: int = 10
) -> Path:
    text = (QUICKSTART / "job.yaml").read_text()
    text = text.replace("name: quickstart", f"name: {name}")
    text = text.replace("command: train.py --steps 300", f"command: train.py --steps {steps} {extra}")
    text = text.replace("workdir: .", f"workdir: {QUICKSTART}").replace("  nodes: 2", f"  nodes: {nodes}")
    text = text.replace("every_steps: 50", "every_steps: 10").replace(
        "notice_grace_seconds: 10", f"notice_grace_seconds: {grace}"
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def _final_params(home: Path, job_id: str) -> dict[str, Any]:
    found = CheckpointStore(LocalStorage(home / "jobs" / job_id / "checkpoints")).load_latest()
    assert found is not None
    step, state = found
    assert step == 80
    return state  # type: ignore[no-any-return]


def _progress(home: Path, job_id: str) -> list[dict[str, Any]]:
    return [dict(r.fields) for r in read_progress_records(home / "jobs" / job_id / "progress.jsonl")]


def test_two_preemptions_end_bit_identical_to_an_uninterrupted_run(gpuctl: Gpuctl, tmp_path: Path) -> None:
    ref = gpuctl.run("submit", str(_job(tmp_path, "reference")))
    assert "SUCCEEDED" in ref.stdout
    # a notice with grace (emergency checkpoint), then a kill with no notice at all (grace 0)
    out = gpuctl.run("submit", str(_job(tmp_path, "interrupted", grace=0)), "--spot-schedule",
                     "step:25=0,after:3s=inf,step:52=0,after:3s=inf")  # fmt: skip
    assert "SUCCEEDED" in out.stdout, out.stdout
    jobs = {d["name"]: d for d in json.loads(gpuctl.run("list", "-o", "json").stdout)}
    assert jobs["interrupted"]["preemptions"] == 2 and jobs["interrupted"]["attempts"] == 3
    want = _final_params(gpuctl.home, jobs["reference"]["id"])
    got = _final_params(gpuctl.home, jobs["interrupted"]["id"])
    for part in ("model", "optimizer"):
        for key, tensor in want[part]["state"].items() if part == "optimizer" else want[part].items():
            other = got[part]["state"][key] if part == "optimizer" else got[part][key]
            if isinstance(tensor, dict):
                assert all(
                    torch.equal(tensor[k], other[k]) for k in tensor if isinstance(tensor[k], torch.Tensor)
                )
            else:
                assert torch.equal(tensor, other), f"{part}/{key} differs"


def test_elastic_quickstart_keeps_training_on_one_node_and_keeps_the_global_batch(
    gpuctl: Gpuctl, tmp_path: Path
) -> None:
    job = _job(tmp_path, "elastic", nodes="{min: 1, max: 2}", steps=300)
    out = gpuctl.run("submit", str(job), "--spot-schedule", "step:40=1,after:20s=inf")
    assert "SUCCEEDED" in out.stdout, out.stdout
    doc = json.loads(gpuctl.run("list", "-o", "json").stdout)[0]
    assert [s["nodes"] for s in doc["segments"]] == [2, 1, 2]
    steps = [e for e in _progress(gpuctl.home, doc["id"]) if "event" not in e]
    by_world = {e["world_size"]: e["metrics"] for e in steps}
    assert set(by_world) == {1, 2}, "trained on two nodes, then one, then two again"
    assert {m["global_batch"] for m in by_world.values()} == {64}
    assert by_world[1]["accumulation_steps"] == 2 * by_world[2]["accumulation_steps"]
    assert doc["metrics"]["accuracy"] >= 0.9
