"""The driver: gathers a :class:`JobView`, calls :func:`reconcile`, applies the actions.

Crash safety comes from ordering. All state changes of one tick are written in one transaction
*before* any side effect; nodes are written as ``intent`` first and launched after the commit.
Every tick starts by finishing what a crash may have interrupted: intents are launched (the backend's
launch is idempotent) and nodes the controller has ended but that still run are stopped. So killing
the controller at any instant loses nothing and launches nothing twice.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime
from typing import Any

from orchestrator.backends.base import Backend, LaunchRequest, Placement
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller.actions import (
    Action,
    CloseSegment,
    CountPreemption,
    CountRestart,
    MarkNodesEnded,
    OpenSegment,
    RecordEvent,
    RightSize,
    SegmentStartsNow,
    StartAttempt,
    StopNodes,
    Transition,
)
from orchestrator.controller.market_choice import MarketView, ZoneMarket, changeover_hours
from orchestrator.controller.measurements import gpu_measurements, monitor_usage
from orchestrator.controller.placement import Candidates, candidates_for
from orchestrator.controller.reconcile import JobView, reconcile
from orchestrator.errors import SpecError
from orchestrator.policies import GpuMeasurement, ZoneHistory
from orchestrator.spec import Checkpoint, JobSpec, spec_from_json
from orchestrator.spec import RightSize as RightSizeMode
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore, StoreWrites
from orchestrator.state.usage import UsageStore

log = logging.getLogger(__name__)


def placement_from_dict(data: dict[str, Any]) -> Placement:
    return Placement(**{**data, "market": MarketKind(data["market"])})


def placement_to_dict(placement: Placement) -> dict[str, Any]:
    return {**dataclasses.asdict(placement), "market": placement.market.value}


class Driver:
    def __init__(self, store: JobStore, backend: Backend) -> None:
        self.store = store
        self.backend = backend
        self._candidates: dict[tuple[str, str | None], Candidates] = {}

    def tick(self, job_id: str, now: datetime | None = None) -> list[Action]:
        """One reconcile round for one job. Returns the actions applied (for tests and logs)."""
        now = now or datetime.now(UTC)
        job = self.store.job(job_id)
        try:
            spec = stored_spec(job)
        except SpecError:
            if not job.status.terminal:
                raise  # the controller fails the job (see Controller.tick_job)
            self._stop_ended_nodes(job, _DEFAULT_GRACE_S)  # already ended for it: only stop leftovers
            return []
        UsageStore(self.store).ingest(job.id, now)  # new GPU monitor window summaries of the job's nodes
        self._finish_interrupted(job, spec, now)
        view = self._view(job, spec, now)
        actions = reconcile(view)
        if actions:
            self._apply(job, spec, view, actions, now)
        return actions

    def fail(self, job_id: str, reason: FailureReason, message: str, now: datetime) -> bool:
        """End a job the ticks cannot get past (an error in its data): FAILED with ``reason``, an event,
        its open segment closed and its nodes stopped. Returns False when the job had already ended."""
        job = self.store.job(job_id)
        if job.status.terminal:
            return False
        nodes = self.store.nodes(job.id, job.attempts) if job.attempts else []
        active = [n.node_id for n in nodes if n.launch_state != "ended"]
        with self.store.transaction() as conn:
            StoreWrites.set_launch_state(conn, active, "ended", now)
            StoreWrites.close_segment(conn, job.id, "failed", now)
            self.store.transition(conn, job.id, JobStatus.FAILED, now, message, reason)
        try:
            spec_grace = stored_spec(job).checkpoint.notice_grace_seconds
        except SpecError:
            spec_grace = _DEFAULT_GRACE_S
        try:
            self._stop_ended_nodes(self.store.job(job.id), spec_grace)
        except Exception:  # the next ticks stop nodes marked ended
            log.warning("job %s: stopping its nodes failed; retried next tick", job.id, exc_info=True)
        return True

    def _stop_ended_nodes(self, job: JobRecord, grace_s: float) -> None:
        if job.attempts == 0:
            return
        ended = [n.node_id for n in self.store.nodes(job.id, job.attempts) if n.launch_state == "ended"]
        if ended:
            self.backend.stop(job.id, job.attempts, ended, grace_s)

    # --- 0. finish what a crash interrupted, and the backend's own duties -----------------------
    def _finish_interrupted(self, job: JobRecord, spec: JobSpec, now: datetime) -> None:
        if job.attempts == 0:
            return
        nodes = self.store.nodes(job.id, job.attempts)
        intents = [n.node_id for n in nodes if n.launch_state == "intent"]
        if intents and not job.status.terminal:
            self._launch(job, spec, job.attempts, intents)
        ended = [n.node_id for n in nodes if n.launch_state == "ended"]
        if ended:
            self.backend.stop(job.id, job.attempts, ended, spec.checkpoint.notice_grace_seconds)
        placement = self.store.attempt_placement(job.id, job.attempts)
        spot = placement is not None and placement["market"] == MarketKind.SPOT.value
        node_ids = [n.node_id for n in nodes]
        self.backend.tick(job.id, job.attempts, node_ids, spot, spec.checkpoint.notice_grace_seconds, now)

    # --- 1. what the reconcile step sees ---------------------------------------------------------
    def _view(self, job: JobRecord, spec: JobSpec, now: datetime) -> JobView:
        placement_data = self.store.attempt_placement(job.id, job.attempts) if job.attempts else None
        placement = placement_from_dict(placement_data) if placement_data else None
        all_nodes = self.store.nodes(job.id, job.attempts) if job.attempts else []
        active_ids = [n.node_id for n in all_nodes if n.launch_state != "ended"]
        observation = self.backend.observe(job.id, job.attempts, active_ids) if job.attempts else None
        ended_ids = [n.node_id for n in all_nodes if n.launch_state == "ended"]
        draining = bool(ended_ids) and any(
            not n.phase.ended for n in self.backend.observe(job.id, job.attempts, ended_ids).nodes
        )
        segments = self.store.segments(job.id)
        open_segments = [s for s in segments if s.ended_at is None]
        progress = observation.progress if observation else None
        fresh = bool(
            progress and progress.time and open_segments and progress.time >= open_segments[-1].started_at
        )
        sizing = self.store.job_options(job.id).get("right_size", {})
        market = self._market_view(
            job, spec, sizing.get("gpu_type") if sizing.get("apply") else None, segments, now
        )
        placing = job.status in (JobStatus.PLACING, JobStatus.RECOVERING, JobStatus.RESCALING)
        measurements: tuple[GpuMeasurement, ...] = ()
        if placing and spec.policies.right_size is not RightSizeMode.OFF:
            measurements = gpu_measurements(self.store, job, now, monitor_usage(self.store))
        zone = placement.zone if placement else (market.zones[0].zone if market.zones else "")
        capacity = {z.zone: z.capacity for z in market.zones}
        return JobView(
            spec=spec,
            status=job.status,
            now=now,
            submitted_at=job.submitted_at,
            deadline=job.deadline,
            attempt=job.attempts,
            placement=placement,
            nodes=observation.nodes if observation else (),
            open_segment_nodes=open_segments[-1].nodes if open_segments else None,
            progress=progress,
            progress_fresh=fresh,
            draining=draining,
            preempted_in_attempt=any(n.notice_at is not None for n in all_nodes),
            spot_capacity=capacity[zone]
            if zone in capacity
            else self.backend.spot_capacity(job.id, zone, now),
            market=market,
            measurements=measurements,
            right_size_pick=sizing.get("gpu_type"),
            cost_usd=sum(s.cost_usd(now) for s in segments),
            restarts=job.restarts,
            preemptions=job.preemptions,
            cancel_requested=self.store.cancel_requested(job.id),
        )

    def _market_view(
        self,
        job: JobRecord,
        spec: JobSpec,
        sized_type: str | None,
        segments: list[SegmentRecord],
        now: datetime,
    ) -> MarketView:
        """Every zone's spot offer and capacity now, and the availability history (updated and saved).

        ``sized_type``: the GPU type right-size placed the job on (``auto``), instead of the spec's list.
        """
        key = (job.id, sized_type)
        if key not in self._candidates:
            note = " (simulated: local nodes priced as this instance)" if self.backend.name == "local" else ""
            if sized_type is not None:
                resources = spec.resources.model_copy(update={"gpu_types": [sized_type]})
                spec = spec.model_copy(update={"resources": resources})
            self._candidates[key] = candidates_for(spec, self.backend.own_placements(spec), note)
        found = self._candidates[key]
        zones = tuple(
            ZoneMarket(zone, spot, self.backend.spot_capacity(job.id, zone, now))
            for zone, spot in found.spot_by_zone.items()
        )
        saved = self.store.market_history(job.id)
        history, tick_h = ZoneHistory.empty(), 0.0
        if saved is not None:
            history = ZoneHistory(**saved[1])
            tick_h = max(0.0, (now - saved[0]).total_seconds() / 3600.0)
        if not job.status.terminal:
            up = {z.zone: (z.capacity is None or z.capacity >= spec.resources.min_nodes) for z in zones}
            history = history.updated(tick_h, up)
            self.store.set_market_history(job.id, now, dataclasses.asdict(history))
        return MarketView(zones, found.on_demand, history, tick_h, _run_hours(segments, spec, now))

    # --- 2. apply: state first, in one transaction; then side effects ----------------------------
    def _apply(
        self, job: JobRecord, spec: JobSpec, view: JobView, actions: list[Action], now: datetime
    ) -> None:
        attempt = job.attempts
        placement = view.placement
        to_launch: list[str] = []
        to_stop: list[tuple[tuple[str, ...], float]] = []
        with self.store.transaction() as conn:
            for action in actions:
                if isinstance(action, Transition):
                    self.store.transition(conn, job.id, action.target, now, action.message, action.reason)
                elif isinstance(action, StartAttempt):
                    placement = action.placement
                    attempt = StoreWrites.start_attempt(conn, job.id, placement_to_dict(placement), now)
                    to_launch = [f"{job.id}-a{attempt}-n{i}" for i in range(action.nodes)]
                    StoreWrites.add_node_intents(conn, job.id, attempt, to_launch, now)
                    StoreWrites.open_segment(
                        conn, job.id, attempt, placement_to_dict(placement), action.nodes, now
                    )
                elif isinstance(action, OpenSegment):
                    assert placement is not None, "a segment needs a placement"
                    StoreWrites.open_segment(
                        conn, job.id, attempt, placement_to_dict(placement), action.nodes, now
                    )
                elif isinstance(action, SegmentStartsNow):
                    StoreWrites.restart_open_segment(conn, job.id, now)
                elif isinstance(action, CloseSegment):
                    StoreWrites.close_segment(conn, job.id, action.reason, now)
                elif isinstance(action, MarkNodesEnded):
                    StoreWrites.set_launch_state(conn, action.node_ids, "ended", now)
                elif isinstance(action, StopNodes):
                    ids = action.node_ids or tuple(n.node_id for n in view.nodes if not n.phase.ended)
                    StoreWrites.set_launch_state(conn, ids, "ended", now)
                    to_stop.append((ids, action.grace_s))
                elif isinstance(action, CountPreemption):
                    StoreWrites.increment(conn, job.id, "preemptions")
                elif isinstance(action, CountRestart):
                    StoreWrites.increment(conn, job.id, "restarts")
                elif isinstance(action, RightSize):
                    StoreWrites.set_option(
                        conn, job.id, "right_size", {"gpu_type": action.gpu_type, "apply": action.apply}
                    )
                    StoreWrites.event(conn, job.id, now, "right_size", action.why)
                elif isinstance(action, RecordEvent):
                    StoreWrites.event(conn, job.id, now, action.kind, action.message)
        for ids, grace in to_stop:
            self.backend.stop(job.id, attempt, ids, grace)
        if to_launch:
            self._launch(self.store.job(job.id), spec, attempt, to_launch)
        if any(isinstance(a, Transition) and a.target.terminal for a in actions):
            self._write_summary(job.id, view)

    def _launch(self, job: JobRecord, spec: JobSpec, attempt: int, node_ids: list[str]) -> None:
        data = self.store.attempt_placement(job.id, attempt)
        assert data is not None
        job_dir = self.store.job_dir(job.id)
        request = LaunchRequest(
            job_id=job.id,
            attempt=attempt,
            spec=spec,
            placement=placement_from_dict(data),
            node_ids=node_ids,
            min_nodes=spec.resources.min_nodes,
            max_nodes=spec.resources.max_nodes,
            checkpoint_dir=spec.checkpoint.path or str(job_dir / "checkpoints"),
            job_dir=job_dir,
        )
        self.backend.launch(request)
        with self.store.transaction() as conn:
            StoreWrites.set_launch_state(conn, node_ids, "launched", datetime.now(UTC))

    def _write_summary(self, job_id: str, view: JobView) -> None:
        progress = view.progress
        summary: dict[str, Any] = {}
        if progress is not None:
            summary = {"step": progress.step, "loss": progress.loss, "metrics": dict(progress.metrics)}
        self.store.set_summary(job_id, summary)


_DEFAULT_GRACE_S = Checkpoint().notice_grace_seconds


def stored_spec(job: JobRecord) -> JobSpec:
    """The job's spec as stored at submission; :class:`SpecError` when it no longer validates."""
    return spec_from_json(job.spec_json, source=f"stored spec of job {job.id}")


def _run_hours(segments: list[SegmentRecord], spec: JobSpec, now: datetime) -> float:
    """Hours the job held nodes, less one changeover per attempt: its work done, when nothing better is known."""
    spans: dict[int, tuple[datetime, datetime]] = {}
    for seg in segments:
        end = seg.ended_at or now
        first, last = spans.get(seg.attempt, (seg.started_at, end))
        spans[seg.attempt] = (min(first, seg.started_at), max(last, end))
    change_h = changeover_hours(spec)
    return sum(max(0.0, (last - first).total_seconds() / 3600.0 - change_h) for first, last in spans.values())
