"""Training progress on Kubernetes: the sidecars' progress lines -> ``status.progress`` -> the engine's view
(RUNNING on a fresh step, success on a finished record, work done for the deadline fallback)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import jsonschema
import pytest

from orchestrator.backends.kubernetes.crd import status_openapi_schema
from orchestrator.backends.kubernetes.progress import advance, progress_of, progress_records, with_progress
from orchestrator.contract import PROGRESS_LINE_PREFIX
from tests.operators.kubernetes.test_kube_step import T0, job, launched, pod, pruned, run


def line(at: datetime, step: int, **record: Any) -> str:
    """A progress line as the sidecar prints it."""
    doc = {"time": at.isoformat(), "step": step, **record}
    return PROGRESS_LINE_PREFIX + json.dumps(doc)


def step_line(at: datetime, step: int) -> str:
    return line(at, step, total_steps=1000, loss=2.0 / step, world_size=16, metrics={}, data_s=0.1)


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


WINDOW = json.dumps({"kind": "window", "start": 1.0, "end": 61.0})


def test_progress_lines_among_the_monitor_log() -> None:
    torn = PROGRESS_LINE_PREFIX + '{"time": "2026-01-01T00:00:01+00:00", "st'
    text = "\n".join(
        ["gpuctl monitor: serving /metrics", WINDOW, step_line(T0, 1), torn, step_line(T0, 2), "garbage"]
    )
    assert [r["step"] for r in progress_records(text)] == [1, 2]


def test_newest_record_counts_once_across_re_reads_and_pods() -> None:
    t = [T0 + timedelta(seconds=10 * i) for i in range(6)]
    first = "\n".join(step_line(x, i + 1) for i, x in enumerate(t[:3]))
    status = with_progress({"state": "RUNNING"}, [first])
    want = {
        "step": 3,
        "totalSteps": 1000,
        "loss": 2.0 / 3,
        "worldSize": 16,
        "finished": False,
        "time": iso(t[2]),
    }
    assert status["progress"] == want
    # the next pass re-reads the same lines (sinceSeconds reaches back) and an older pod's: no change
    older_pod = step_line(t[0] - timedelta(hours=1), 99)
    again = with_progress(json.loads(json.dumps(status)), [first, older_pod])
    assert again == status
    # lines of two pods, interleaved in time: taken in time order, the newest wins
    later = with_progress(status, [step_line(t[4], 5), step_line(t[3], 4)])
    assert later["progress"]["step"] == 5 and later["progress"]["time"] == iso(t[4])


def test_finished_record_carries_metrics_and_a_resume_clears_them() -> None:
    lines = [step_line(T0, 10), line(T0 + timedelta(seconds=5), 10, event="checkpoint")]
    lines.append(
        line(T0 + timedelta(seconds=9), 10, event="finished", metrics={"accuracy": 0.97, "note": "x"})
    )
    progress = advance(None, progress_records("\n".join(lines)))
    assert progress is not None and progress["finished"] is True and progress["metrics"] == {"accuracy": 0.97}
    seen = progress_of({"progress": progress})
    assert seen is not None and seen.finished and seen.step == 10 and seen.total_steps == 1000
    assert seen.metrics == {"accuracy": 0.97} and seen.time == T0 + timedelta(seconds=9)
    resumed = advance(progress, progress_records(line(T0 + timedelta(minutes=1), 10, event="resumed")))
    assert resumed is not None and resumed["finished"] is False and "metrics" not in resumed
    assert progress_of({}) is None and progress_of({"progress": {"time": "x"}}) is None


def test_progress_fits_the_crd_schema() -> None:
    progress = advance(None, progress_records(step_line(T0, 1) + "\n" + line(T0 + timedelta(1), 1,
                                              event="finished", metrics={"acc": 1})))  # fmt: skip
    schema = status_openapi_schema()
    jsonschema.Draft4Validator(schema).validate({"progress": progress})
    assert pruned({"progress": progress}, schema) == []


# --- the engine's view ---------------------------------------------------------------------------
def with_line(status: dict[str, Any], *lines: str) -> dict[str, Any]:
    return with_progress(status, ["\n".join(lines)])


def test_a_job_with_progress_runs_on_a_fresh_step_only() -> None:
    spec = job(1)
    first = run(spec, with_line({}, step_line(T0 - timedelta(hours=1), 50)), [])  # a stale line
    status = launched(first)
    stale = run(spec, status, [pod("j-n0", 1)], timedelta(minutes=1))
    assert stale.status["state"] == "LAUNCHING"  # pods running, but no step since the attempt began
    fresh = run(spec, with_line(status, step_line(T0 + timedelta(seconds=30), 51)), [pod("j-n0", 1)],
                timedelta(minutes=1))  # fmt: skip
    assert fresh.status["state"] == "RUNNING" and fresh.status["progress"]["step"] == 51
    # without any progress line (an image without the runtime) running pods stand in, as before
    bare = {k: v for k, v in status.items() if k != "progress"}
    assert run(spec, bare, [pod("j-n0", 1)], timedelta(minutes=1)).status["state"] == "RUNNING"


def running_with_progress(spec: Any, step: int, at: timedelta) -> dict[str, Any]:
    status = launched(run(spec, {}, []))
    status = with_line(status, step_line(T0 + timedelta(seconds=30), 1))
    d = run(spec, status, [pod("j-n0", 1)], timedelta(minutes=1))
    assert d.status["state"] == "RUNNING"
    return with_line(d.status, step_line(T0 + at - timedelta(minutes=1), step))


def test_finished_training_then_a_lost_pod_is_success_with_metrics() -> None:
    spec = job(1)
    status = running_with_progress(spec, 1000, timedelta(hours=1))
    status = with_line(status, line(T0 + timedelta(minutes=59, seconds=30), 1000, event="finished",
                                    metrics={"accuracy": 0.97}))  # fmt: skip
    # the node was reclaimed after the final checkpoint: a finished job is never run again
    d = run(spec, status, [pod("j-n0", 1, "Failed", reason="Evicted")], timedelta(hours=1))
    assert d.status["state"] == "SUCCEEDED" and not d.launch
    assert d.status["progress"]["metrics"] == {"accuracy": 0.97}


@pytest.mark.parametrize(("step", "market"), [(100, "on-demand"), (900, "spot")])
def test_deadline_fallback_weighs_the_work_done(step: int, market: str) -> None:
    """8 compute hours by a 10 h deadline, preempted after 3 h: with a tenth done the slack is gone and the
    job goes on-demand; with 90 % done it can ride spot (the stand-in, no work known, would go on-demand)."""
    spec = job(1, goals={"deadline": "10h", "compute_hours": 8},
               market={"mode": "spot-with-fallback", "policy": "greedy"})  # fmt: skip
    status = running_with_progress(spec, step, timedelta(hours=3))
    d = run(spec, status, [pod("j-n0", 1, "Failed", reason="Evicted")], timedelta(hours=3))
    assert d.status["state"] == "PREEMPTED" and d.stop == ("j-a1-n0",)
    for seconds in (10, 20, 30):  # the evicted pod deleted: recover, place again
        if d.launch:
            break
        d = run(spec, launched(d), [], timedelta(hours=3, seconds=seconds))
    assert d.status["attempt"] == 2 and d.launch, d.status.get("message")
    assert d.status["market"] == market
