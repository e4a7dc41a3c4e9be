"""The operator hosts the watchdog, the forecasts and "why is it waiting?" through the same engine:
a GPUJob's status gets ``forecast`` (the ETA column), ``stalled`` Events and a ``Waiting`` condition."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import jsonschema
import pytest

from orchestrator.backends.kubernetes.crd import status_openapi_schema
from orchestrator.cli.status_document import kubernetes_document, status_json_schema
from tests.operators.kubernetes.test_kube_step import T0, condition, job, pod, pruned, run, running


def _progress(step: int, seconds: float, total: int = 100) -> dict[str, Any]:
    return {"step": step, "totalSteps": total, "time": (T0 + timedelta(seconds=seconds)).isoformat()}


def _at(status: dict[str, Any], step: int, seconds: float) -> Any:
    """A tick at ``seconds`` after T0, the sidecars having reported ``step`` at that moment."""
    return run(
        job(1), {**status, "progress": _progress(step, seconds)}, [pod("j-n0", 1)], timedelta(seconds=seconds)
    )


def test_a_running_gpujob_gets_a_forecast_within_2_percent_and_its_schema_keeps_it() -> None:
    status = running(job(1), 1)
    status = _at(status, 10, 60).status
    d = _at(status, 20, 120)
    found = d.status["forecast"]
    # 10 steps a minute, 80 steps left: 480 s more; 1 node at 10 USD/h spot, 40 on-demand.
    assert found["etaSeconds"] == pytest.approx(480, rel=0.02)
    assert found["finishAt"] == (T0 + timedelta(seconds=600)).isoformat().replace("+00:00", "Z")
    assert found["costToFinishUsd"] == pytest.approx(480 / 3600 * 10, rel=0.02)
    assert found["costToFinishOnDemandUsd"] == pytest.approx(480 / 3600 * 40, rel=0.02)
    assert pruned(d.status, status_openapi_schema()) == []
    obj = {"spec": job(1).to_dict(), "status": d.status,
           "metadata": {"name": "j", "namespace": "ml", "creationTimestamp": "2026-01-01T00:00:00Z"}}  # fmt: skip
    doc = kubernetes_document(obj, T0 + timedelta(seconds=120)).as_json()
    jsonschema.Draft202012Validator(status_json_schema()).validate(doc)
    assert doc["forecast"]["eta_seconds"] == pytest.approx(480, rel=0.02)


def test_a_gpujob_whose_step_stops_raises_one_stalled_event() -> None:
    status = running(job(1), 1)
    for i, seconds in enumerate((60, 120, 180)):
        status = _at(status, 10 * (i + 1), seconds).status
    quiet = {**status, "progress": _progress(30, 180)}
    early = run(job(1), quiet, [pod("j-n0", 1)], timedelta(seconds=180 + 590))
    assert not [e for e in early.events if e.startswith("stalled")]
    d = run(job(1), early.status, [pod("j-n0", 1)], timedelta(seconds=180 + 610))
    (event,) = [e for e in d.events if e.startswith("stalled")]
    assert "step 30 has not advanced for 10.2 min" in event
    again = run(
        job(1), {**d.status, "progress": _progress(30, 180)}, [pod("j-n0", 1)], timedelta(seconds=900)
    )
    assert not [e for e in again.events if e.startswith("stalled")]  # once per episode
    assert again.status["state"] == "RUNNING"


def test_an_unschedulable_gpujob_says_why_in_its_waiting_condition() -> None:
    d = run(job(1), {}, [])
    unschedulable = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]  # fmt: skip
    waiting = run(
        job(1), d.status, [pod("j-n0", 1, "Pending", conditions=unschedulable)], timedelta(seconds=30)
    )
    cond = condition(waiting.status, "Waiting")
    assert (cond["status"], cond["reason"]) == ("True", "Unschedulable")
    assert "4 Insufficient nvidia.com/gpu" in cond["message"]
    assert pruned(waiting.status, status_openapi_schema()) == []
    started = run(job(1), waiting.status, [pod("j-n0", 1)], timedelta(seconds=60))
    assert started.status["state"] == "RUNNING"
    assert condition(started.status, "Waiting")["status"] == "False"
