"""The operator's pure decision: GPUJob status + observed pods + now -> new status and pod actions.

No API calls here. All state the next decision needs is in the returned status (the operator keeps
none of its own, so it can restart at any time):

- ``pods``: names of the pods we created and have not deleted (one that vanishes is a lost node);
- ``desiredNodes``: how many pods the job should have now (below ``max`` after a rescale);
- ``segments``: spans of time on one set of nodes, priced per node-hour (the cost so far).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.backends.base import NodeObservation, NodePhase, Placement
from orchestrator.backends.kubernetes.manifests import pod_name
from orchestrator.spec import JobSpec
from orchestrator.state.status import JobStatus

_LIVE = (NodePhase.STARTING, NodePhase.RUNNING)
_LOST = (NodePhase.PREEMPTED, NodePhase.LOST)


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    create: tuple[int, ...] = ()
    """Node indices whose pods to create."""
    delete: tuple[str, ...] = ()
    """Pod names to delete."""
    events: tuple[str, ...] = ()


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def set_condition(
    status: dict[str, Any], kind: str, value: bool, reason: str, message: str, now: datetime
) -> None:
    conditions = [c for c in status.get("conditions", []) if c.get("type") != kind]
    old = next((c for c in status.get("conditions", []) if c.get("type") == kind), None)
    flag = "True" if value else "False"
    changed = old is None or old.get("status") != flag
    when = _iso(now) if changed or old is None else old.get("lastTransitionTime", _iso(now))
    conditions.append(
        {"type": kind, "status": flag, "reason": reason, "message": message, "lastTransitionTime": when}
    )
    status["conditions"] = conditions


def _segment_cost(seg: Mapping[str, Any], now: datetime) -> float:
    end = _time(seg["end"]) if seg.get("end") else now
    hours = max(0.0, (end - _time(seg["start"])).total_seconds() / 3600)
    return hours * float(seg.get("nodes", 0)) * float(seg.get("nodePriceUsdPerHour", 0.0))


def _close_segment(status: dict[str, Any], now: datetime, reason: str) -> None:
    segments = status.get("segments", [])
    if segments and not segments[-1].get("end"):
        segments[-1] = {**segments[-1], "end": _iso(now), "endReason": reason}


def _open_segment(status: dict[str, Any], nodes: int, placement: Placement, now: datetime) -> None:
    status.setdefault("segments", []).append(
        {
            "start": _iso(now),
            "end": None,
            "nodes": nodes,
            "gpuType": placement.gpu_type,
            "market": str(placement.market),
            "nodePriceUsdPerHour": placement.node_price_usd_per_hour,
        }
    )


def _finish(status: dict[str, Any], state: JobStatus, reason: str, message: str, now: datetime) -> None:
    _close_segment(status, now, reason.lower())
    status["state"] = str(state)
    status["message"] = message
    status["nodes"] = 0
    set_condition(status, "Running", False, reason, message, now)
    set_condition(status, reason, True, reason, message, now)


def _restart_all(status: dict[str, Any], live: Sequence[str], now: datetime, reason: str) -> tuple[str, ...]:
    _close_segment(status, now, reason)
    status["attempt"] = int(status.get("attempt", 1)) + 1
    status["state"] = str(JobStatus.RECOVERING)
    status["nodes"] = 0
    status["pods"] = []
    return tuple(live)


def decide(
    spec: JobSpec,
    status_in: Mapping[str, Any],
    observed: Sequence[NodeObservation],
    placement: Placement,
    job: str,
    now: datetime,
    regrow_after_s: float = 600.0,
) -> Decision:
    """One reconcile step. ``observed``: one entry per pod of the job that exists now.

    An elastic job running below ``max`` nodes asks for the missing ones again after ``regrow_after_s``.
    """
    decision = _decide(spec, status_in, observed, placement, job, now, regrow_after_s)
    decision.status["costUsd"] = round(sum(_segment_cost(s, now) for s in decision.status["segments"]), 6)
    return decision


def _decide(
    spec: JobSpec,
    status_in: Mapping[str, Any],
    observed: Sequence[NodeObservation],
    placement: Placement,
    job: str,
    now: datetime,
    regrow_after_s: float,
) -> Decision:
    status: dict[str, Any] = {k: v for k, v in status_in.items()}
    status["segments"] = [dict(s) for s in status_in.get("segments", [])]
    status["conditions"] = [dict(c) for c in status_in.get("conditions", [])]
    state = JobStatus(status.get("state", JobStatus.PENDING))
    if state.terminal:
        return Decision(status)
    res = spec.resources
    status.setdefault("attempt", 1)
    status.setdefault("restarts", 0)
    status.setdefault("preemptions", 0)
    status.setdefault("desiredNodes", res.max_nodes)
    status.setdefault("pods", [])
    status.update(
        gpuType=placement.gpu_type,
        market=str(placement.market),
        nodePriceUsdPerHour=placement.node_price_usd_per_hour,
    )
    events: list[str] = []

    by_name = {o.node_id: o for o in observed}
    vanished = [NodeObservation(n, NodePhase.LOST) for n in status["pods"] if n not in by_name]
    mine = [by_name[n] for n in status["pods"] if n in by_name] + vanished
    live = [o.node_id for o in mine if o.phase in _LIVE]
    lost = [o for o in mine if o.phase in _LOST]
    failed = [o for o in mine if o.phase is NodePhase.FAILED]
    succeeded = [o for o in mine if o.phase is NodePhase.SUCCEEDED]
    delete: list[str] = []

    if failed:
        code = failed[0].exit_code
        retry_codes = spec.recovery.retry_exit_codes
        status["restarts"] += 1
        if (retry_codes and code not in retry_codes) or status["restarts"] > spec.recovery.max_restarts:
            why = f"node {failed[0].node_id} exited with code {code}; restarts used: {status['restarts'] - 1}"
            _finish(status, JobStatus.FAILED, "Failed", why, now)
            status["pods"] = []
            return Decision(
                status, delete=tuple(live + [o.node_id for o in mine if o.phase.ended]), events=(why,)
            )
        events.append(f"node {failed[0].node_id} exited with code {code}: restarting all nodes")
        delete += [o.node_id for o in mine if o.phase.ended and o.node_id in by_name]
        delete += _restart_all(status, live, now, "failed")
        return Decision(status, delete=tuple(delete), events=tuple(events))

    if lost:
        status["preemptions"] += len(lost)
        names = ", ".join(o.node_id for o in lost)
        delete += [o.node_id for o in lost if o.node_id in by_name]
        max_p = spec.recovery.max_preemptions
        if max_p is not None and status["preemptions"] > max_p:
            why = f"{status['preemptions']} preemptions exceed recovery.max_preemptions={max_p}"
            _finish(status, JobStatus.FAILED, "Failed", why, now)
            status["pods"] = []
            return Decision(status, delete=tuple(delete + live), events=(why,))
        head_alive = pod_name(job, 0) in live
        if res.elastic and spec.policies.rescale and len(live) >= res.min_nodes and head_alive:
            _close_segment(status, now, "preempted")
            status["desiredNodes"] = len(live)
            status["pods"] = live
            status["nodes"] = len(live)
            status["state"] = str(JobStatus.RUNNING)
            status["rescaledAt"] = _iso(now)
            msg = f"lost {names}; continuing on {len(live)} node(s)"
            set_condition(status, "Rescaled", True, "Rescaled", msg, now)
            set_condition(status, "Preempted", True, "Preempted", f"lost {names}", now)
            _open_segment(status, len(live), placement, now)
            return Decision(status, delete=tuple(delete), events=(msg,))
        msg = f"lost {names}; restarting attempt {int(status['attempt']) + 1} from the newest checkpoint"
        set_condition(status, "Preempted", True, "Preempted", msg, now)
        set_condition(status, "Running", False, "Preempted", msg, now)
        status["desiredNodes"] = res.max_nodes
        delete += _restart_all(status, live, now, "preempted")
        return Decision(status, delete=tuple(delete), events=(msg,))

    if succeeded and not live:
        msg = f"all {len(succeeded)} node(s) finished"
        _finish(status, JobStatus.SUCCEEDED, "Succeeded", msg, now)
        return Decision(status, events=(msg,))

    desired = int(status["desiredNodes"])
    rescaled_at = status.get("rescaledAt")
    if (
        desired < res.max_nodes
        and rescaled_at
        and (now - _time(rescaled_at)).total_seconds() >= regrow_after_s
    ):
        desired = status["desiredNodes"] = res.max_nodes
        status.pop("rescaledAt")
        events.append(f"asking for {res.max_nodes} node(s) again")
    present = {o.node_id for o in observed}
    free = [i for i in range(res.max_nodes * 2) if pod_name(job, i) not in present]
    create = tuple(free[: max(0, desired - len(live))])
    if create:
        if not live:
            _close_segment(status, now, "restarted")
            set_condition(
                status,
                "Placed",
                True,
                "Placed",
                f"{desired} x {placement.gpu_type} on {placement.market}",
                now,
            )
            status["state"] = str(JobStatus.LAUNCHING)
        status["pods"] = live + [pod_name(job, i) for i in create]
        events.append(f"creating {len(create)} pod(s) of attempt {status['attempt']}")
    running = [o for o in mine if o.phase is NodePhase.RUNNING]
    if not create and live and len(running) == len(live):
        if status.get("state") != str(JobStatus.RUNNING) or status.get("nodes") != len(running):
            _close_segment(status, now, "resized")
            _open_segment(status, len(running), placement, now)
            status["state"] = str(JobStatus.RUNNING)
        status["nodes"] = len(running)
        set_condition(status, "Running", True, "Running", f"{len(running)} node(s) training", now)
    return Decision(status, create=create, events=tuple(events))
