"""The operator's decision: gpuctl's controller reconcile step, fed from a GPUJob's status and pods.

The policy is :func:`orchestrator.controller.reconcile.reconcile`, the same pure function the local and
SLURM controllers use. This module only translates: GPUJob ``.status`` + pod phases -> ``JobView``,
and the returned actions -> a new ``.status`` plus pods to create and delete. No API calls here.

Status keys (all job state; the operator keeps none): ``state``, ``attempt``, ``placement``,
``pods`` (pods of the attempt), ``endedNodes``, ``segments``, ``restarts``, ``preemptions``,
``preemptedInAttempt``, ``rescaledAt``, ``conditions``, ``costUsd``, and display fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from orchestrator.backends.base import NodeObservation, NodePhase, Placement, Progress
from orchestrator.backends.kubernetes.manifests import LABEL_ATTEMPT, pod_name
from orchestrator.backends.kubernetes.observe import pod_phase
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller import actions as act
from orchestrator.controller.reconcile import JobView, reconcile
from orchestrator.spec import JobSpec, parse_deadline
from orchestrator.state.status import JobStatus

MAX_PASSES = 4
"""Pure transitions (PENDING -> PLACING -> LAUNCHING) are chained within one operator pass."""

_CONDITIONS: dict[JobStatus, tuple[str, bool]] = {
    JobStatus.LAUNCHING: ("Placed", True),
    JobStatus.RUNNING: ("Running", True),
    JobStatus.PREEMPTED: ("Preempted", True),
    JobStatus.RESCALING: ("Rescaled", True),
    JobStatus.SUCCEEDED: ("Succeeded", True),
    JobStatus.FAILED: ("Failed", True),
}


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    create: tuple[int, ...] = ()
    """Node indices whose pods to create (placement: ``status['placement']``)."""
    delete: tuple[str, ...] = ()
    events: tuple[str, ...] = ()


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def placement_from(data: Mapping[str, Any] | None) -> Placement | None:
    if not data:
        return None
    return Placement(**{**data, "market": MarketKind(data["market"])})


def set_condition(
    status: dict[str, Any], kind: str, value: bool, reason: str, message: str, now: datetime
) -> None:
    old = next((c for c in status.get("conditions", []) if c.get("type") == kind), None)
    flag = "True" if value else "False"
    when = old["lastTransitionTime"] if old and old.get("status") == flag else iso(now)
    others = [c for c in status.get("conditions", []) if c.get("type") != kind]
    status["conditions"] = [
        *others,
        {
            "type": kind,
            "status": flag,
            "reason": reason,
            "message": message[:1000],
            "lastTransitionTime": when,
        },
    ]


def segments_cost(segments: Sequence[Mapping[str, Any]], now: datetime) -> float:
    total = 0.0
    for seg in segments:
        end = _time(seg["end"]) if seg.get("end") else now
        hours = max(0.0, (end - _time(seg["start"])).total_seconds() / 3600)
        total += hours * float(seg.get("nodes", 0)) * float(seg.get("nodePriceUsdPerHour", 0.0))
    return round(total, 6)


def _attempt_of(pod: Mapping[str, Any]) -> int:
    return int((pod.get("metadata", {}).get("labels") or {}).get(LABEL_ATTEMPT, "0"))


def build_view(
    spec: JobSpec,
    status: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    existing_nodes: set[str] | None,
    candidates: tuple[Placement | None, Placement | None],
    created_at: datetime,
    now: datetime,
    regrow_after_s: float,
) -> JobView:
    attempt = int(status.get("attempt", 0))
    ended = set(status.get("endedNodes", []))
    current = {str(p["metadata"]["name"]): p for p in pods if _attempt_of(p) == attempt}
    nodes = [
        pod_phase(current[n], existing_nodes)
        for n in status.get("pods", [])
        if n in current and n not in ended
    ]
    nodes += [
        NodeObservation(n, NodePhase.LOST)
        for n in status.get("pods", [])
        if n not in current and n not in ended
    ]
    draining = any(
        _attempt_of(p) != attempt or p["metadata"].get("deletionTimestamp") or p["metadata"]["name"] in ended
        for p in pods
    )
    alive = [n for n in nodes if not n.phase.ended]
    all_running = bool(alive) and all(n.phase is NodePhase.RUNNING for n in alive)
    segments = status.get("segments", [])
    open_nodes = segments[-1]["nodes"] if segments and not segments[-1].get("end") else None
    rescaled_at = status.get("rescaledAt")
    recently_rescaled = rescaled_at and (now - _time(rescaled_at)).total_seconds() < regrow_after_s
    deadline = parse_deadline(spec.goals.deadline, created_at) if spec.goals.deadline else None
    return JobView(
        spec=spec,
        status=JobStatus(status.get("state", JobStatus.PENDING)),
        now=now,
        submitted_at=created_at,
        deadline=deadline,
        attempt=attempt,
        placement=placement_from(status.get("placement")),
        nodes=tuple(nodes),
        open_segment_nodes=open_nodes,
        # Pods do not report training progress to the operator: all pods running stands in for it.
        progress=Progress(step=0) if all_running else None,
        progress_fresh=all_running,
        draining=draining,
        preempted_in_attempt=bool(status.get("preemptedInAttempt")),
        # Kubernetes does not say how much spot capacity exists; after losing nodes assume none more
        # for ``regrow_after_s``, then try to grow again.
        spot_capacity=len(alive) if recently_rescaled else None,
        spot=candidates[0],
        on_demand=candidates[1],
        cost_usd=segments_cost(segments, now),
        restarts=int(status.get("restarts", 0)),
        preemptions=int(status.get("preemptions", 0)),
    )


class _Applier:
    """Applies actions to a copy of the status, collecting pod creations and deletions."""

    def __init__(self, status: Mapping[str, Any], view: JobView, job: str, now: datetime) -> None:
        self.status: dict[str, Any] = {k: v for k, v in status.items()}
        self.status["segments"] = [dict(s) for s in status.get("segments", [])]
        self.status["conditions"] = [dict(c) for c in status.get("conditions", [])]
        self.view, self.job, self.now = view, job, now
        self.create: list[int] = []
        self.delete: list[str] = []
        self.events: list[str] = []

    def _placement(self) -> Placement | None:
        return placement_from(self.status.get("placement"))

    def _open(self, nodes: int) -> None:
        placement = self._placement()
        segment: dict[str, Any] = {
            "start": iso(self.now),
            "end": None,
            "attempt": int(self.status.get("attempt", 0)),
            "nodes": nodes,
            "gpuType": placement.gpu_type if placement else "",
            "market": str(placement.market) if placement else "",
            "nodePriceUsdPerHour": placement.node_price_usd_per_hour if placement else 0.0,
        }
        if placement is not None:  # what `gpuctl status` shows of each segment on every backend
            segment.update(
                zone=placement.zone,
                cloud=placement.cloud,
                instanceType=placement.instance_type,
                gpusPerNode=placement.gpus_per_node,
                onDemandNodePriceUsdPerHour=placement.on_demand_node_price_usd_per_hour,
                priceSource=placement.price_source,
            )
        self.status["segments"].append(segment)

    def _alive(self) -> list[str]:
        return [n.node_id for n in self.view.nodes if not n.phase.ended]

    def apply(self, action: act.Action) -> None:
        st, now = self.status, self.now
        if isinstance(action, act.Transition):
            st["state"] = str(action.target)
            st["message"] = action.message
            if action.reason is not None:
                st["failureReason"] = str(action.reason)
            self.events.append(f"{action.target}: {action.message}")
            kind = _CONDITIONS.get(action.target)
            if kind is not None:
                set_condition(st, kind[0], kind[1], kind[0], action.message, now)
            if action.target is not JobStatus.RUNNING:
                set_condition(
                    st, "Running", False, kind[0] if kind else str(action.target), action.message, now
                )
        elif isinstance(action, act.StartAttempt):
            st["attempt"] = int(st.get("attempt", 0)) + 1
            st["placement"] = {**asdict(action.placement), "market": str(action.placement.market)}
            st.update(
                gpuType=action.placement.gpu_type,
                market=str(action.placement.market),
                nodePriceUsdPerHour=action.placement.node_price_usd_per_hour,
                desiredNodes=action.nodes,
                endedNodes=[],
                preemptedInAttempt=False,
                rescaledAt=None,
            )
            self.create = list(range(action.nodes))
            st["pods"] = [pod_name(self.job, i) for i in self.create]
            self._open(action.nodes)
        elif isinstance(action, act.StopNodes):
            self.delete += list(action.node_ids) or self._alive()
        elif isinstance(action, act.CloseSegment):
            segs = st["segments"]
            if segs and not segs[-1].get("end"):
                segs[-1] = {**segs[-1], "end": iso(now), "endReason": action.reason}
        elif isinstance(action, act.OpenSegment):
            self._open(action.nodes)
            st["desiredNodes"] = action.nodes
            st["rescaledAt"] = iso(now)
        elif isinstance(action, act.MarkNodesEnded):
            st["endedNodes"] = [*st.get("endedNodes", []), *action.node_ids]
            self.delete += [n for n in action.node_ids if n not in self.delete]
        elif isinstance(action, act.CountPreemption):
            st["preemptions"] = int(st.get("preemptions", 0)) + 1
            st["preemptedInAttempt"] = True
        elif isinstance(action, act.CountRestart):
            st["restarts"] = int(st.get("restarts", 0)) + 1
        elif isinstance(action, act.RecordEvent):
            self.events.append(f"{action.kind}: {action.message}")


def step(
    spec: JobSpec,
    status: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    existing_nodes: set[str] | None,
    candidates: tuple[Placement | None, Placement | None],
    job: str,
    created_at: datetime,
    now: datetime,
    regrow_after_s: float = 600.0,
) -> Decision:
    """Run the controller's reconcile on the job until it asks for nothing but pure transitions."""
    current: Mapping[str, Any] = status
    create: list[int] = []
    delete: list[str] = []
    events: list[str] = []
    for _ in range(MAX_PASSES):
        view = build_view(spec, current, pods, existing_nodes, candidates, created_at, now, regrow_after_s)
        planned = reconcile(view)
        if not planned:
            break
        applier = _Applier(current, view, job, now)
        for action in planned:
            applier.apply(action)
        current = applier.status
        create += applier.create
        delete += [n for n in applier.delete if n not in delete]
        events += applier.events
        if applier.create or applier.delete or not all(isinstance(a, act.Transition) for a in planned):
            break
    final = dict(current)
    ended = set(final.get("endedNodes", []))
    final["nodes"] = len([p for p in final.get("pods", []) if p not in ended and p not in delete])
    final["costUsd"] = segments_cost(final.get("segments", []), now)
    final.setdefault("state", str(JobStatus.PENDING))
    return Decision(final, tuple(create), tuple(delete), tuple(events))
