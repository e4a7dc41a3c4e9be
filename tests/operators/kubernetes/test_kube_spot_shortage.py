"""Spot shortage on Kubernetes: spot pods that stay unschedulable (the test sets the scheduler's
``PodScheduled=False``/``Unschedulable`` condition; no real scheduler or node provisioner runs)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from operators.kubernetes.step import Decision, step, with_state
from orchestrator.backends.base import Placement
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller import engine
from orchestrator.controller.placement import Candidates
from orchestrator.spec import JobSpec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LIMIT_S = 300.0


def placement(market: MarketKind, zone: str, price: float) -> Placement:
    return Placement("H100", market, "gcp", "r1", zone, "a3", 8, price, 40.0, "test")


SPOT_A = placement(MarketKind.SPOT, "r1-a", 10.0)
SPOT_B = placement(MarketKind.SPOT, "r1-b", 12.0)
ON_DEMAND = placement(MarketKind.ON_DEMAND, "r1-a", 40.0)
ONE_ZONE = Candidates({"r1-a": SPOT_A}, ON_DEMAND)
TWO_ZONES = Candidates({"r1-a": SPOT_A, "r1-b": SPOT_B}, ON_DEMAND)


def job(deadline: str, compute_hours: float = 1.5) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "j",
            "command": "t.py",
            "resources": {"nodes": 2},
            "goals": {"deadline": deadline, "compute_hours": compute_hours},
        }
    )


def pod(index: int, attempt: int, scheduled: bool = False, since: datetime = T0) -> dict[str, Any]:
    labels = {"gpuctl.dev/job": "j", "gpuctl.dev/attempt": str(attempt), "gpuctl.dev/node-index": str(index)}
    if scheduled:
        status: dict[str, Any] = {"phase": "Running"}
        spec = {"nodeName": "node-1"}
    else:
        stamp = since.isoformat().replace("+00:00", "Z")
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
            "lastTransitionTime": stamp,
        }
        status, spec = {"phase": "Pending", "conditions": [condition]}, {}
    return {"metadata": {"name": f"j-n{index}", "labels": labels}, "spec": spec, "status": status}


def run(
    spec: JobSpec,
    status: dict[str, Any],
    pods: list[dict[str, Any]],
    at: timedelta,
    candidates: Candidates = ONE_ZONE,
) -> Decision:
    return step(spec, status, pods, None, candidates, "j", T0, T0 + at, 600.0, LIMIT_S)


def launched(d: Decision) -> dict[str, Any]:
    """The status once the operator created the pods of ``d`` and recorded them."""
    assert d.state is not None
    return with_state(d.status, engine.mark_launched(d.state, d.launch))


def unschedulable_for(
    spec: JobSpec, minutes: float, candidates: Candidates = ONE_ZONE
) -> tuple[Decision, Decision]:
    """A new spot job whose pods stay unschedulable, one pass a minute for ``minutes``: the pass
    before the limit, and the last one."""
    d = run(spec, {}, [], timedelta(), candidates)
    assert d.status["market"] == "spot" and d.status["zone"] == "r1-a", d.status.get("message")
    status, before = launched(d), d
    for minute in range(1, int(minutes) + 1):
        before = d
        d = run(spec, status, [pod(0, 1), pod(1, 1)], timedelta(minutes=minute), candidates)
        status = d.status
    return before, d


def pods_gone(spec: JobSpec, d: Decision, at: timedelta, candidates: Candidates = ONE_ZONE) -> Decision:
    """The next pass once the stopped pods are deleted."""
    return run(spec, d.status, [], at, candidates)


def test_unschedulable_pods_are_free_and_wait_before_the_limit() -> None:
    _, d = unschedulable_for(job("2h"), 4)
    assert d.status["state"] == "LAUNCHING" and d.stop == () and d.status["preemptions"] == 0
    assert d.status["costUsd"] == 0.0  # queued: the segment starts when the pods do
    assert d.status["segments"][0]["start"] == "2026-01-01T00:04:00Z"
    assert d.status["zoneHistory"]["spotShortSeen"] == {}


def test_tight_deadline_falls_back_to_on_demand_after_the_limit() -> None:
    spec = job("2h")  # slack 30 min at submission: spot; after 6 min queued the policy's net needs on-demand
    before, d = unschedulable_for(spec, 6)
    assert before.stop == ()  # 5 minutes: not past the 300 s limit yet
    assert set(d.stop) == {"j-a1-n0", "j-a1-n1"} and d.status["state"] == "PREEMPTED"
    assert d.status["zoneHistory"]["spotShortSeen"] == {"r1-a": "2026-01-01T00:06:00Z"}
    assert d.status["zoneHistory"]["lastAvailable"] == {"r1-a": False}
    (segment,) = d.status["segments"]
    assert segment["start"] == segment["end"] == "2026-01-01T00:06:00Z" and d.status["costUsd"] == 0.0
    held = run(spec, d.status, [pod(0, 1), pod(1, 1)], timedelta(minutes=6, seconds=30))
    assert held.launch == ()  # the unscheduled pods are being deleted first
    new = pods_gone(spec, held, timedelta(minutes=7))
    assert new.status["attempt"] == 2 and new.status["market"] == "on-demand", new.status.get("message")
    assert new.launch == ("j-a2-n0", "j-a2-n1")
    assert new.status["costUsd"] == 0.0


def test_loose_deadline_waits_in_the_queue_and_costs_nothing() -> None:
    spec = job("48h")
    _, d = unschedulable_for(spec, 20)
    assert d.stop == () and d.launch == () and d.status["attempt"] == 1
    assert d.status["state"] == "LAUNCHING" and d.status["market"] == "spot"
    assert d.status["zoneHistory"]["spotShortSeen"] == {"r1-a": "2026-01-01T00:20:00Z"}
    assert d.status["costUsd"] == 0.0 and d.status["preemptions"] == 0
    # Capacity appears: the same pods start, billed from then on.
    up = run(spec, d.status, [pod(0, 1, True), pod(1, 1, True)], timedelta(minutes=21))
    assert up.status["state"] == "RUNNING" and up.status["zoneHistory"]["spotShortSeen"] == {}
    later = run(spec, up.status, [pod(0, 1, True), pod(1, 1, True)], timedelta(minutes=81))
    # 2 nodes x $10/h from the last pass that saw them queued (minute 20): the queued time is free.
    assert later.status["costUsd"] == round(2 * 10.0 * 61 / 60, 6)


def test_a_short_zone_moves_the_job_to_another_zones_spot() -> None:
    spec = job("48h")
    _, d = unschedulable_for(spec, 6, TWO_ZONES)
    assert d.status["state"] == "PREEMPTED" and d.status["costUsd"] == 0.0
    new = pods_gone(spec, d, timedelta(minutes=7), TWO_ZONES)
    assert new.status["market"] == "spot" and new.status["zone"] == "r1-b", new.status.get("message")
    assert new.status["zoneHistory"]["lastAvailable"] == {"r1-a": False, "r1-b": True}


@pytest.mark.parametrize(
    ("candidates", "next_zone", "short"),
    [(TWO_ZONES, "r1-b", {"r1-a": "2026-01-01T01:01:00Z"}), (ONE_ZONE, "r1-a", {})],
)
def test_a_reclaimed_zone_is_short_when_the_job_has_another(
    candidates: Candidates, next_zone: str, short: dict[str, str]
) -> None:
    """Spot nodes taken back by the market: with another zone the reclaimed one offers no capacity
    for the retry time (as a trace would show it), so the job goes elsewhere; with one zone it is
    placed there again (its queued pods are a free way to wait)."""
    spec = job("48h")
    d = run(spec, {}, [], timedelta(), candidates)
    d = run(spec, launched(d), [pod(0, 1, True), pod(1, 1, True)], timedelta(minutes=1), candidates)
    assert d.status["state"] == "RUNNING"
    evicted = [{**pod(i, 1, True), "status": {"phase": "Failed", "reason": "Evicted"}} for i in (0, 1)]
    d = run(spec, d.status, evicted, timedelta(minutes=61), candidates)
    assert d.status["state"] == "PREEMPTED" and d.status["zoneHistory"]["spotShortSeen"] == short
    new = pods_gone(spec, d, timedelta(minutes=62), candidates)
    assert (new.status["market"], new.status["zone"]) == ("spot", next_zone), new.status.get("message")


def test_pods_unschedulable_for_another_reason_count_from_their_condition() -> None:
    spec = job("2h")
    d = run(spec, {}, [], timedelta())
    status = launched(d)
    late = T0 + timedelta(minutes=4)  # the scheduler gave up on them only at minute 4
    d = run(spec, status, [pod(0, 1, since=late), pod(1, 1, since=late)], timedelta(minutes=6))
    assert d.stop == () and d.status["state"] == "LAUNCHING"
    one_scheduled = [pod(0, 1), {**pod(1, 1), "status": {"phase": "Pending"}, "spec": {"nodeName": "n"}}]
    d = run(spec, d.status, one_scheduled, timedelta(minutes=10))
    assert d.stop == (), "only an attempt whose every pod is unschedulable is short"
