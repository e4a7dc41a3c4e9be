"""The operator's pure decision step, without any API server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from operators.kubernetes.decide import decide
from orchestrator.backends.base import NodeObservation, NodePhase, Placement
from orchestrator.catalog.offers import MarketKind
from orchestrator.spec import JobSpec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PLACE = Placement("H100", MarketKind.SPOT, "aws", "r", "z", "p5", 8, 10.0, 40.0, "test")


def job(nodes: Any = 2, **over: Any) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "command": "t.py", "resources": {"nodes": nodes}, **over})


def obs(*phases: tuple[int, NodePhase], code: int | None = None) -> list[NodeObservation]:
    return [NodeObservation(f"j-n{i}", p, exit_code=code) for i, p in phases]


R, S, P, F, OK = (
    NodePhase.RUNNING,
    NodePhase.STARTING,
    NodePhase.PREEMPTED,
    NodePhase.FAILED,
    NodePhase.SUCCEEDED,
)


def running(spec: JobSpec, n: int) -> dict[str, Any]:
    d1 = decide(spec, {}, [], PLACE, "j", T0)
    d2 = decide(spec, d1.status, obs(*[(i, R) for i in range(n)]), PLACE, "j", T0)
    assert d2.status["state"] == "RUNNING"
    return d2.status


def test_new_job_creates_all_pods_then_runs_and_costs() -> None:
    d = decide(job(2), {}, [], PLACE, "j", T0)
    assert d.create == (0, 1) and d.status["state"] == "LAUNCHING"
    assert d.status["pods"] == ["j-n0", "j-n1"]
    again = decide(job(2), d.status, obs((0, S), (1, S)), PLACE, "j", T0)
    assert again.create == () and again.status["state"] == "LAUNCHING"
    status = running(job(2), 2)
    later = decide(job(2), status, obs((0, R), (1, R)), PLACE, "j", T0 + timedelta(hours=1))
    assert later.status["costUsd"] == 20.0  # 2 nodes x 1 h x $10


def test_preemption_restarts_a_fixed_job_as_a_new_attempt() -> None:
    status = running(job(2), 2)
    d = decide(job(2), status, obs((0, R), (1, P)), PLACE, "j", T0 + timedelta(minutes=30))
    assert set(d.delete) == {"j-n0", "j-n1"} and d.create == ()
    assert d.status["attempt"] == 2 and d.status["preemptions"] == 1 and d.status["state"] == "RECOVERING"
    assert d.status["segments"][-1]["endReason"] == "preempted"
    preempted = next(c for c in d.status["conditions"] if c["type"] == "Preempted")
    assert preempted["status"] == "True"
    d2 = decide(job(2), d.status, [], PLACE, "j", T0 + timedelta(minutes=31))
    assert d2.create == (0, 1) and d2.status["state"] == "LAUNCHING"


def test_elastic_job_rescales_down_then_regrows() -> None:
    spec = job({"min": 2, "max": 3})
    status = running(spec, 3)
    d = decide(spec, status, obs((0, R), (1, R), (2, P)), PLACE, "j", T0 + timedelta(minutes=10))
    assert d.delete == ("j-n2",) and d.create == ()
    assert d.status["desiredNodes"] == 2 and d.status["attempt"] == 1
    assert next(c for c in d.status["conditions"] if c["type"] == "Rescaled")["reason"] == "Rescaled"
    steady = decide(spec, d.status, obs((0, R), (1, R)), PLACE, "j", T0 + timedelta(minutes=11))
    assert steady.create == ()
    grow = decide(spec, steady.status, obs((0, R), (1, R)), PLACE, "j", T0 + timedelta(minutes=25))
    assert grow.create == (2,) and grow.status["desiredNodes"] == 3


def test_elastic_job_below_min_or_without_head_restarts() -> None:
    spec = job({"min": 2, "max": 3})
    status = running(spec, 3)
    d = decide(spec, status, obs((0, R), (1, P), (2, P)), PLACE, "j", T0)
    assert d.status["attempt"] == 2
    d = decide(spec, status, obs((0, P), (1, R), (2, R)), PLACE, "j", T0)
    assert d.status["attempt"] == 2  # node 0 hosts the rendezvous store


def test_crash_retries_then_fails_after_max_restarts() -> None:
    spec = job(1, recovery={"max_restarts": 1})
    status = running(spec, 1)
    d = decide(spec, status, obs((0, F), code=1), PLACE, "j", T0)
    assert d.status["state"] == "RECOVERING" and d.status["restarts"] == 1
    d2 = decide(spec, d.status, [], PLACE, "j", T0)
    d3 = decide(spec, d2.status, obs((0, R)), PLACE, "j", T0)
    d4 = decide(spec, d3.status, obs((0, F), code=1), PLACE, "j", T0)
    assert d4.status["state"] == "FAILED"
    assert next(c for c in d4.status["conditions"] if c["type"] == "Failed")["status"] == "True"
    assert decide(spec, d4.status, [], PLACE, "j", T0).create == ()


def test_exit_code_not_in_retry_list_fails_at_once() -> None:
    spec = job(1, recovery={"retry_exit_codes": [3]})
    d = decide(spec, running(spec, 1), obs((0, F), code=2), PLACE, "j", T0)
    assert d.status["state"] == "FAILED"


def test_success_when_all_pods_finished() -> None:
    status = running(job(2), 2)
    partial = decide(job(2), status, obs((0, OK), (1, R)), PLACE, "j", T0)
    assert partial.status["state"] == "RUNNING"
    d = decide(job(2), status, obs((0, OK), (1, OK)), PLACE, "j", T0 + timedelta(hours=2))
    assert d.status["state"] == "SUCCEEDED" and d.status["costUsd"] == 40.0


def test_vanished_pod_counts_as_lost() -> None:
    status = running(job(2), 2)
    d = decide(job(2), status, obs((0, R)), PLACE, "j", T0)
    assert d.status["preemptions"] == 1 and d.status["attempt"] == 2
