"""`gpuctl status` and `list` show why a job waits and a running job's forecast, on the local store,
and the documents stay valid against the status-document schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from orchestrator.cli.main import main
from orchestrator.cli.status_document import status_json_schema
from orchestrator.controller.loop import Controller
from orchestrator.spec import load_spec_text
from orchestrator.state.store import JobStore
from orchestrator.testing import FakeClock, SimScript, SimulatedBackend


def _job(home: Path, clock: FakeClock, backend: SimulatedBackend, name: str) -> str:
    store = JobStore(home)
    spec = load_spec_text(f"name: {name}\ncommand: train.py\nresources: {{nodes: 2}}\n")
    job = store.create_job(name=spec.name, user="u", team="t", backend="local",
                           spec_json=spec.model_dump_json(), deadline=None, now=clock.now())  # fmt: skip
    backend.script(job.id, SimScript(steps=10_000))
    return job.id


def test_status_and_list_show_the_waiting_reason_and_the_forecast(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    clock = FakeClock()
    backend = SimulatedBackend(clock)
    trains, waits = _job(tmp_path, clock, backend, "trains"), _job(tmp_path, clock, backend, "waits")
    controller = Controller(JobStore(tmp_path), backend)
    for _ in range(3):
        clock.advance(10)
        controller.tick_job(waits, clock.now())  # placed and launched; not ticked again: it waits
    for _ in range(12):
        clock.advance(10)
        backend.advance()
        controller.tick_job(trains, clock.now())
    schema = status_json_schema()

    assert main(["status", waits, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["state"] == "LAUNCHING" and doc["forecast"] is None
    assert doc["waiting_reason"] == "2 of 2 node(s) of attempt 1 starting" and doc["waiting_since"]

    assert main(["status", trains, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["state"] == "RUNNING" and doc["waiting_reason"] is None
    assert doc["forecast"]["steps_per_second"] == pytest.approx(0.1, rel=0.02)
    assert main(["status", trains]) == 0
    assert "forecast: ETA " in capsys.readouterr().out

    assert main(["list", "-o", "wide"]) == 0
    table = capsys.readouterr().out
    assert "REASON" in table and "2 of 2 node(s) of attempt 1 starting" in table
