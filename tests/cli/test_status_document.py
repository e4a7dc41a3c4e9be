"""One status document on local, SLURM and Kubernetes: each backend's validates against the schema that
`gpuctl spec status-schema` prints, with the same keys (null where a backend cannot know)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from operators.kubernetes.step import step, with_state
from orchestrator.backends.base import Placement
from orchestrator.backends.slurm import SlurmClusterConfig, commands, status_from_slurm
from orchestrator.catalog.offers import MarketKind
from orchestrator.cli.main import main
from orchestrator.cli.status_document import (
    kubernetes_document,
    local_document,
    slurm_document,
    status_json_schema,
)
from orchestrator.cli.views import summary_lines
from orchestrator.controller import engine
from orchestrator.controller.actions import CloseSegment, Transition
from orchestrator.spec import JobSpec
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing.states import drive, running_job

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SLURM_DATA = Path(__file__).parents[1] / "backends" / "slurm" / "data"


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    found = status_json_schema()
    jsonschema.Draft202012Validator.check_schema(found)
    return found


def valid(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    jsonschema.Draft202012Validator(schema).validate(doc)
    return doc


def _preempted_local_job(store: JobStore) -> str:
    job_id = running_job(store, NOW, name="trainer", nodes=2)
    gave_up = Transition(JobStatus.FAILED, "gave up", FailureReason.TOO_MANY_RESTARTS)
    drive(store, job_id, NOW + timedelta(hours=1), CloseSegment("preempted"), gave_up)
    return job_id


def test_schema_command_prints_the_schema(schema: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "status-schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == schema and printed["additionalProperties"] is False
    assert {"failure_reason", "segments", "backend_details", "cost_usd"} <= set(printed["required"])


def test_local_status_validates(
    schema: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    job_id = _preempted_local_job(JobStore(tmp_path))
    assert main(["status", job_id, "-o", "json"]) == 0
    doc = valid(json.loads(capsys.readouterr().out), schema)
    assert doc["state"] == "FAILED" and doc["failure_reason"] == "too_many_restarts"
    [seg] = doc["segments"]
    assert (seg["attempt"], seg["zone"], seg["end_reason"], seg["cost_usd"]) == (
        1,
        "use1-az1",
        "preempted",
        2.0,
    )
    assert (
        doc["on_demand_equivalent_usd"] == 6.0 and doc["savings_usd"] == 4.0 and doc["backend_details"] == {}
    )
    assert main(["list", "-o", "json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert valid(listed, schema)["id"] == job_id


def test_slurm_status_validates(schema: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """From `status_from_slurm` over captured `squeue --json` output (no cluster)."""
    for capture, name, state in [("squeue-22.05.json", "sj2", "SUCCEEDED"),
                                 ("squeue-22.05-node-down.json", "6", "RECOVERING")]:  # fmt: skip
        text = (SLURM_DATA / capture).read_text()
        monkeypatch.setattr(commands, "run_slurm", lambda argv, text=text: text)
        monkeypatch.setattr(commands, "submitting_user", lambda: (0, "root"))  # the captures' owner
        found = status_from_slurm(name, SlurmClusterConfig())
        doc = valid(slurm_document(found, NOW).as_json(), schema)
        assert doc["backend"] == "slurm" and doc["state"] == state and "failure_reason" in doc
        assert doc["backend_details"]["slurm_job_id"] == found.slurm_job.job_id
        for seg in doc["segments"]:
            assert seg["attempt"] >= 1 and "zone" in seg


def test_kubernetes_status_validates(schema: dict[str, Any]) -> None:
    """A GPUJob whose status the operator's step wrote: placed, running, preempted, placed again."""
    spot = Placement("H100", MarketKind.SPOT, "aws", "r", "us-east-1a", "p5", 8, 10.0, 40.0, "test")
    od = Placement("H100", MarketKind.ON_DEMAND, "aws", "r", "us-east-1b", "p5", 8, 40.0, 40.0, "test")
    spec = JobSpec.model_validate({"name": "j", "command": "t.py", "user": "ann", "team": "ml",
                                   "resources": {"nodes": 1}, "market": {"mode": "spot"}})  # fmt: skip

    def pod(attempt: int, phase: str = "Running", **status: Any) -> dict[str, Any]:
        labels = {"gpuctl.dev/job": "j", "gpuctl.dev/attempt": str(attempt), "gpuctl.dev/node-index": "0"}
        return {"metadata": {"name": "j-n0", "labels": labels}, "status": {"phase": phase, **status}}

    def at(status: dict[str, Any], pods: list[dict[str, Any]], minutes: int) -> dict[str, Any]:
        d = step(spec, status, pods, None, (spot, od), "j", NOW, NOW + timedelta(minutes=minutes))
        assert d.state is not None  # the pods of LaunchNodes are created and recorded launched
        return with_state(d.status, engine.mark_launched(d.state, d.launch))

    status = at({}, [], 0)
    status = at(status, [pod(1)], 1)
    status = at(status, [pod(1, "Failed", reason="Evicted")], 61)
    status = at(status, [], 62)
    assert status["attempt"] == 2 and status["preemptions"] == 1
    obj = {"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GPUJob", "spec": spec.to_dict(), "status": status,
           "metadata": {"name": "j", "namespace": "ml", "creationTimestamp": "2026-11-22T12:00:00Z"}}  # fmt: skip
    doc = valid(kubernetes_document(obj, NOW + timedelta(minutes=62)).as_json(), schema)
    # on Kubernetes the user is the GPUJob's namespace, whatever spec.user says (no cost spoofing)
    assert (doc["backend"], doc["user"], doc["team"], doc["state"]) == ("kubernetes", "ml", "ml", "LAUNCHING")
    assert [s["attempt"] for s in doc["segments"]] == [1, 2]
    assert [s["zone"] for s in doc["segments"]] == ["us-east-1a", "us-east-1a"]
    hours = 61 / 60  # placed at minute 0, evicted at 61, placed again at 62 (now)
    assert (
        doc["segments"][0]["cost_usd"] == pytest.approx(10.0 * hours) and doc["segments"][1]["cost_usd"] == 0
    )
    assert doc["segments"][0]["end_reason"] == "preempted" and doc["segments"][1]["ended_at"] is None
    assert doc["on_demand_equivalent_usd"] == pytest.approx(40.0 * hours, abs=1e-5)
    assert doc["gpu_hours"] == pytest.approx(8 * hours, abs=1e-5) and doc["nodes"] == 1
    assert doc["backend_details"]["namespace"] == "ml" and doc["failure_reason"] is None


def test_every_backend_has_the_same_keys(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _preempted_local_job(store)
    job = store.job(job_id)
    local = local_document(job, store.segments(job_id), None, {}, NOW).as_json()
    # a segment as operators before this version wrote it: no attempt, zone or on-demand price
    legacy = {"start": "2026-11-22T12:00:00Z", "end": None, "nodes": 1, "gpuType": "H100", "market": "spot",
              "nodePriceUsdPerHour": 2.0}  # fmt: skip
    gpujob = kubernetes_document({"metadata": {"name": "j"}, "status": {"segments": [legacy]}}, NOW).as_json()
    assert set(local) == set(gpujob) and set(local["segments"][0]) == set(gpujob["segments"][0])
    assert gpujob["failure_reason"] is None and gpujob["segments"][0]["attempt"] is None
    assert gpujob["on_demand_equivalent_usd"] is None and gpujob["nodes"] is None


def test_metrics_of_any_kind_are_shown(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job = store.job(_preempted_local_job(store))
    summary = {"metrics": {"accuracy": 0.91234, "best_epoch": 3, "note": "early stop"}}
    doc = local_document(job, store.segments(job.id), None, summary, NOW).as_json()
    assert doc["metrics"] == summary["metrics"]
    assert "final metrics: accuracy 0.9123, best_epoch 3, note early stop" in summary_lines(doc)


def test_kubernetes_status_shows_progress_and_final_metrics(schema: dict[str, Any]) -> None:
    """``status.progress`` the operator keeps from the sidecars' progress lines: steps like a local job."""
    progress = {"step": 420, "totalSteps": 1000, "loss": 0.25, "worldSize": 16, "finished": False,
                "time": "2026-11-22T12:30:00Z"}  # fmt: skip
    obj = {"metadata": {"name": "j", "namespace": "ml"}, "status": {"state": "RUNNING", "progress": progress}}
    doc = valid(kubernetes_document(obj, NOW).as_json(), schema)
    assert doc["progress"] == {"step": 420, "total_steps": 1000, "loss": 0.25, "world_size": 16}
    assert doc["metrics"] is None  # only a finished run has final metrics
    finished = {**progress, "step": 1000, "finished": True, "metrics": {"accuracy": 0.97}}
    obj["status"] = {"state": "SUCCEEDED", "progress": finished}
    doc = valid(kubernetes_document(obj, NOW).as_json(), schema)
    assert doc["progress"]["step"] == 1000 and doc["metrics"] == {"accuracy": 0.97}
    assert "final metrics: accuracy 0.9700" in summary_lines(doc)
    obj["status"] = {"state": "RUNNING", "progress": {"totalSteps": "many"}}  # unreadable: left out
    assert kubernetes_document(obj, NOW).progress is None
