"""The operator's decision: gpuctl's controller reconcile and engine fed from GPUJob status and pods (no API)."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

from operators.kubernetes import reconcile as operator_reconcile
from operators.kubernetes import step as operator_step
from operators.kubernetes.step import Decision, load_state, step, with_state
from orchestrator.backends.base import Placement
from orchestrator.backends.kubernetes.crd import status_openapi_schema
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller import engine, host
from orchestrator.controller.admission import Refused
from orchestrator.spec import JobSpec
from orchestrator.state.status import FailureReason

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SPOT = Placement("H100", MarketKind.SPOT, "aws", "r", "z", "p5", 8, 10.0, 40.0, "test")
ON_DEMAND = Placement("H100", MarketKind.ON_DEMAND, "aws", "r", "z", "p5", 8, 40.0, 40.0, "test")


def job(nodes: Any = 2, **over: Any) -> JobSpec:
    return JobSpec.model_validate(
        {"name": "j", "command": "t.py", "resources": {"nodes": nodes}, "market": {"mode": "spot"}, **over}
    )


def pod(
    name: str, attempt: int, phase: str = "Running", exit_code: int | None = None, **status: Any
) -> dict[str, Any]:
    containers = (
        [{"name": "trainer", "state": {"terminated": {"exitCode": exit_code}}}]
        if exit_code is not None
        else []
    )
    index = name.rsplit("-n", 1)[1]
    labels = {"gpuctl.dev/job": "j", "gpuctl.dev/attempt": str(attempt), "gpuctl.dev/node-index": index}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"phase": phase, "containerStatuses": containers, **status},
    }


def run(
    spec: JobSpec, status: dict[str, Any], pods: list[dict[str, Any]], at: timedelta = timedelta()
) -> Decision:
    return step(spec, status, pods, None, (SPOT, ON_DEMAND), "j", T0, T0 + at)


def launched(d: Decision) -> dict[str, Any]:
    """The status once the operator created the pods of ``d`` and recorded them (its second patch)."""
    assert d.state is not None
    return with_state(d.status, engine.mark_launched(d.state, d.launch))


def running(spec: JobSpec, n: int) -> dict[str, Any]:
    d = run(spec, {}, [])
    assert d.status["state"] == "LAUNCHING" and d.launch == tuple(f"j-a1-n{i}" for i in range(n))
    d = run(spec, launched(d), [pod(f"j-n{i}", 1) for i in range(n)])
    assert d.status["state"] == "RUNNING"
    return d.status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_new_job_is_placed_on_spot_and_costs_by_segment() -> None:
    d = run(job(2), {}, [])
    assert d.status["attempt"] == 1 and d.status["market"] == "spot"
    assert [n["nodeId"] for n in d.status["attemptNodes"]] == ["j-a1-n0", "j-a1-n1"]
    assert {n["launch"] for n in d.status["attemptNodes"]} == {"intent"}  # written before any pod exists
    assert condition(d.status, "Placed")["status"] == "True"
    status = running(job(2), 2)
    assert condition(status, "Running")["status"] == "True"
    later = run(job(2), status, [pod("j-n0", 1), pod("j-n1", 1)], timedelta(hours=1))
    assert later.status["costUsd"] == 20.0  # 2 nodes x 1 h x $10


def test_evicted_pod_preempts_and_relaunches_a_fixed_job() -> None:
    status = running(job(2), 2)
    d = run(
        job(2), status, [pod("j-n0", 1), pod("j-n1", 1, "Failed", reason="Evicted")], timedelta(minutes=30)
    )
    assert set(d.stop) == {"j-a1-n0", "j-a1-n1"}
    assert d.status["preemptions"] == 1 and condition(d.status, "Preempted")["status"] == "True"
    assert d.status["segments"][-1]["endReason"] == "preempted"
    d2 = run(job(2), d.status, [], timedelta(minutes=31))
    assert d2.status["attempt"] == 2 and d2.launch == ("j-a2-n0", "j-a2-n1")


def test_old_pods_still_terminating_hold_the_relaunch() -> None:
    status = running(job(1), 1)
    d = run(job(1), status, [pod("j-n0", 1, "Failed", exit_code=75)])
    terminating = pod("j-n0", 1)
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    held = run(job(1), d.status, [terminating])
    assert held.launch == () and held.status["attempt"] == 1


def test_elastic_job_rescales_down_on_node_loss() -> None:
    spec = job({"min": 2, "max": 3})
    status = running(spec, 3)
    pods = [pod("j-n0", 1), pod("j-n1", 1), pod("j-n2", 1, "Failed", exit_code=75)]
    d = run(spec, status, pods, timedelta(minutes=10))
    assert d.stop == ("j-a1-n2",) and d.launch == ()
    assert d.status["attempt"] == 1 and d.status["nodes"] == 2 and d.status["desiredNodes"] == 2
    assert condition(d.status, "Rescaled")["status"] == "True"
    steady = run(spec, d.status, pods[:2], timedelta(minutes=11))
    assert steady.status["state"] == "RUNNING" and steady.stop == ()
    assert [s["nodes"] for s in steady.status["segments"]] == [3, 2]


def test_crash_is_retried_then_fails() -> None:
    spec = job(1, recovery={"max_restarts": 1})
    status = running(spec, 1)
    d = run(spec, status, [pod("j-n0", 1, "Failed", exit_code=1)])
    assert d.status["restarts"] == 1 and d.status["state"] in ("RECOVERING", "LAUNCHING")
    d = run(spec, d.status, [])
    d = run(spec, d.status, [pod("j-n0", 2)])
    d = run(spec, d.status, [pod("j-n0", 2, "Failed", exit_code=1)])
    assert d.status["state"] == "FAILED" and condition(d.status, "Failed")["status"] == "True"


def test_success_and_lost_pods() -> None:
    status = running(job(2), 2)
    d = run(
        job(2), status, [pod("j-n0", 1, "Succeeded", exit_code=0), pod("j-n1", 1, "Succeeded", exit_code=0)]
    )
    assert d.status["state"] == "SUCCEEDED" and condition(d.status, "Succeeded")["status"] == "True"
    gone = run(job(2), status, [pod("j-n0", 1)])
    assert gone.status["preemptions"] == 1


def test_an_intent_without_its_pod_is_starting_not_lost() -> None:
    d = run(job(2), {}, [])  # written, then the operator died before creating the pods
    again = run(job(2), d.status, [], timedelta(minutes=1))
    assert again.status["state"] == "LAUNCHING" and again.status["preemptions"] == 0
    assert again.launch == () and again.stop == ()  # the next pass creates the pods; nothing new here


def test_a_status_written_before_the_engine_loads_and_is_rewritten() -> None:
    """An operator before the engine kept pod names (``pods``, ``endedNodes``) and wrote the same flat
    segments: its RUNNING job goes on, the pods of its attempt are the engine's launched nodes."""
    old = {
        "state": "RUNNING", "attempt": 1, "pods": ["j-n0", "j-n1", "j-n2"], "endedNodes": ["j-n2"],
        "placement": {"gpu_type": "H100", "market": "spot", "cloud": "aws", "region": "r", "zone": "z",
                      "instance_type": "p5", "gpus_per_node": 8, "node_price_usd_per_hour": 10.0,
                      "on_demand_node_price_usd_per_hour": 40.0, "price_source": "test"},
        "segments": [{"start": "2026-01-01T00:00:00Z", "end": None, "nodes": 2, "gpuType": "H100",
                      "market": "spot", "nodePriceUsdPerHour": 10.0}],
        "restarts": 0, "preemptions": 0, "costUsd": 0.0, "conditions": [],
        "rescaledAt": "2026-01-01T00:55:00Z",  # lost j-n2 a while ago: no regrowing yet
    }  # fmt: skip
    state = load_state(old, "j")
    assert [(n.node_id, n.launch.value) for n in state.attempt_nodes] == [
        ("j-a1-n0", "launched"), ("j-a1-n1", "launched"), ("j-a1-n2", "ended")
    ]  # fmt: skip
    assert state.segments[0].placement.on_demand_node_price_usd_per_hour == 10.0  # unknown: no savings
    d = run(job({"min": 2, "max": 3}), old, [pod("j-n0", 1), pod("j-n1", 1)], timedelta(hours=1))
    assert d.status["state"] == "RUNNING" and d.stop == () and d.status["costUsd"] == 20.0
    assert "pods" not in d.status and "endedNodes" not in d.status
    assert d.status["segments"][0]["start"] == "2026-01-01T00:00:00Z" and d.status["nodes"] == 2
    gone = run(job(2), old, [pod("j-n0", 1)])  # a launched node without its pod is lost
    assert gone.status["preemptions"] == 1


def test_the_operator_applies_actions_only_through_the_engine() -> None:
    """The operator's tick is the one host's (which applies through the engine), its ends are the
    host's fail and refusal; it never builds a view nor applies an action itself."""
    assert not hasattr(operator_step, "_Applier")
    assert "host.run_tick(" in inspect.getsource(operator_step.step)
    assert "host.run_tick(" in inspect.getsource(operator_reconcile.reconcile_job)
    assert "engine.apply(" in inspect.getsource(host.decide)
    assert "host.fail(" in inspect.getsource(operator_step.fail)
    assert "host.refuse(" in inspect.getsource(operator_step.refuse)
    sources = inspect.getsource(operator_step) + inspect.getsource(operator_reconcile)
    for action in ("StartAttempt", "OpenSegment", "SegmentStartsNow", "CountPreemption", "CountRestart"):
        assert action not in sources, action


def pruned(value: Any, schema: dict[str, Any], path: str = "status") -> list[str]:
    """What the API server would prune of ``value``: keys its structural ``schema`` does not name."""
    if isinstance(value, dict) and "properties" in schema:
        lost = [f"{path}.{k}" for k in value if k not in schema["properties"]]
        return lost + [
            p for k, v in value.items() if k in schema["properties"]
            for p in pruned(v, schema["properties"][k], f"{path}.{k}")
        ]  # fmt: skip
    if isinstance(value, list) and "items" in schema:
        return [p for i, v in enumerate(value) for p in pruned(v, schema["items"], f"{path}[{i}]")]
    return []


def test_every_status_field_written_is_in_the_crd_schema() -> None:
    schema = status_openapi_schema()
    spec = job({"min": 2, "max": 3})
    status = running(spec, 3)
    pods = [pod("j-n0", 1), pod("j-n1", 1), pod("j-n2", 1, "Failed", exit_code=75)]
    rescaled = run(spec, status, pods, timedelta(minutes=10)).status
    assert rescaled["rescaledAt"] and rescaled["segments"][0]["end"] and rescaled["attemptNodes"]
    for written in (status, rescaled):
        assert pruned(written, schema) == []


def test_the_deadline_is_resolved_once_and_kept_in_the_status() -> None:
    """A relative deadline counts from the GPUJob's creation, resolved at its first pass and stored
    with its state: later passes read it there (a spec or clock that moves does not move it)."""
    spec = job(1, goals={"deadline": "10h"})
    first = run(spec, {}, [])
    assert first.status["deadline"] == "2026-01-01T10:00:00Z"
    later = step(spec, launched(first), [pod("j-n0", 1)], None, (SPOT, ON_DEMAND), "j", T0 + timedelta(hours=5),
                 T0 + timedelta(hours=6))  # fmt: skip
    assert later.state is not None and later.state.deadline == T0 + timedelta(hours=10)
    assert later.status["deadline"] == "2026-01-01T10:00:00Z"


def test_a_failure_sets_one_failed_condition_with_its_reason() -> None:
    """Failing and refusing are the engine's transitions; the status writer sets the Failed condition
    (its reason the failure reason) and one Event names it."""
    failed = operator_step.fail(running(job(1), 1), "j", FailureReason.BACKEND_ERROR, "pod refused", T0)
    assert failed.status["state"] == "FAILED" and failed.stop == ("j-a1-n0",)
    assert condition(failed.status, "Failed")["reason"] == "BackendError"
    assert condition(failed.status, "Running")["status"] == "False"
    assert failed.events == ("FAILED (backend_error): pod refused",)
    refused = operator_step.refuse({}, "j", Refused(FailureReason.OVER_BUDGET, "too dear", "ask"), T0)
    assert refused.status["state"] == "FAILED" and refused.status["message"] == "too dear (to fix: ask)"
    assert condition(refused.status, "Failed")["reason"] == "OverBudget" and refused.effects == ()
