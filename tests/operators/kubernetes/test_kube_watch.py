"""The operator hosts the watchdog, the forecasts and "why is it waiting?" through the same engine:
a GPUJob's status gets ``forecast`` (the ETA column), ``stalled`` Events and a ``Waiting`` condition."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import jsonschema
import pytest

from orchestrator.backends.kubernetes.crd import status_openapi_schema
from orchestrator.backends.kubernetes.gpu_usage import collect_gpu_usage, monitor_key
from orchestrator.cli.status_document import kubernetes_document, status_json_schema
from orchestrator.state.gpu_usage import WINDOW_KIND
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


def _window(end_s: float, util_pct: float) -> str:
    """One window summary line as the monitor sidecar prints it (60 s, one GPU)."""
    start = (T0 + timedelta(seconds=end_s - 60)).timestamp()
    record = {"kind": WINDOW_KIND, "start": start, "end": start + 60, "duration_s": 60, "gpus": 1,
              "util_mean_pct": util_pct, "util_p95_pct": util_pct, "util_max_pct": util_pct,
              "mem_used_max_bytes": 1, "mem_total_bytes": 2, "idle_seconds": 0}  # fmt: skip
    return json.dumps(record) + "\n"


def test_a_gpujob_whose_gpus_idle_raises_one_idle_event_from_the_sidecars_windows() -> None:
    spec = job(1, watchdog={"idle_after": "5m"})
    running_pod = pod("j-n0", 1)
    status = running(spec, 1)
    busy = "".join(_window(s, 80.0) for s in (60, 120))
    quiet = "".join(_window(s, 1.0) for s in range(180, 420, 60))  # under 5 % from 120 s on
    status, _ = collect_gpu_usage(status, [running_pod], {monitor_key(running_pod): busy + quiet})
    assert status["gpuActivity"]["busyUntil"] == (T0 + timedelta(seconds=120)).timestamp()
    early = run(spec, {**status, "progress": _progress(40, 400)}, [running_pod], timedelta(seconds=400))
    assert not [e for e in early.events if e.startswith("idle")]  # idle 240 s of the 300: not yet
    later, _ = collect_gpu_usage(early.status, [running_pod], {monitor_key(running_pod): _window(480, 1.0)})
    d = run(spec, {**later, "progress": _progress(50, 480)}, [running_pod], timedelta(seconds=480))
    (event,) = [e for e in d.events if e.startswith("idle")]
    assert "under 5 % utilization for 6.0 min" in event
    again = run(spec, {**d.status, "progress": _progress(60, 540)}, [running_pod], timedelta(seconds=540))
    assert not [e for e in again.events if e.startswith("idle")]  # once per episode
    assert pruned(again.status, status_openapi_schema()) == []
