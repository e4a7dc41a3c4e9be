"""The driver: gathers a :class:`JobView`, calls :func:`reconcile`, applies the actions through the engine.

The driver is the engine's host for the local and SLURM backends: the job's :class:`JobState` lives in
the SQLite store, :func:`orchestrator.controller.engine.apply` computes the new state and the effects,
the driver commits the state and then has the backend carry out the effects. (The Kubernetes operator
hosts the same engine with the GPUJob's status as the store and pods as the effects.)

Crash safety comes from ordering. All state changes of one tick are written in one transaction
*before* any side effect; nodes are written as ``intent`` first and launched after the commit.
Every tick starts by finishing what a crash may have interrupted: intents are launched (the backend's
launch is idempotent) and nodes the controller has ended but that still run are stopped. So killing
the controller at any instant loses nothing and launches nothing twice.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, assert_never

from orchestrator.backends.base import Backend, LaunchRequest, Placement
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller import engine
from orchestrator.controller.actions import Action, CloseSegment, StopNodes, Transition
from orchestrator.controller.market_choice import MarketView, ZoneMarket, changeover_hours
from orchestrator.controller.measurements import gpu_measurements, monitor_usage
from orchestrator.controller.placement import Candidates, candidates_for
from orchestrator.controller.reconcile import JobView, reconcile_and_explain
from orchestrator.errors import SpecError
from orchestrator.notify import JobRef, NotifyConfig, addressed, enqueue, notifications_for
from orchestrator.policies import GpuMeasurement, ZoneHistory
from orchestrator.policies.context import MarketLog
from orchestrator.policies.daily import MARKET_LOG_H
from orchestrator.policies.market_log import market_log_from
from orchestrator.spec import Checkpoint, JobSpec, MarketMode, spec_from_json
from orchestrator.spec import RightSize as RightSizeMode
from orchestrator.state.job_state import JobEvent, JobState, NodeLaunch, SegmentState
from orchestrator.state.records import JobRecord
from orchestrator.state.state_rows import load_state, save_state
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore
from orchestrator.state.usage import UsageStore
from orchestrator.state.zone_watch import ZoneWatch

log = logging.getLogger(__name__)


def placement_from_dict(data: dict[str, Any]) -> Placement:
    return Placement(**{**data, "market": MarketKind(data["market"])})


def placement_to_dict(placement: Placement) -> dict[str, Any]:
    return {**dataclasses.asdict(placement), "market": placement.market.value}


class Driver:
    """The local and SLURM hosts of the engine: state in the SQLite store, effects through the backend.

    ``notify``: the teams' notification targets (a job's own come with its spec); a tick's
    notifications are added to the store's outbox in the tick's transaction, then ``on_notify`` is
    called (it wakes the delivery worker: the tick never waits on the network)."""

    def __init__(
        self,
        store: JobStore,
        backend: Backend,
        notify: NotifyConfig | None = None,
        on_notify: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.notify = notify or NotifyConfig()
        self.on_notify = on_notify
        self._candidates: dict[tuple[str, str | None], Candidates] = {}
        self._market_logs: dict[str, MarketLog] = {}
        """Job id -> its kept market log (read from the store once; it never changes)."""
        self.draining: dict[str, bool] = {}
        """Job id -> nodes the controller has ended still run (seen at the job's last tick)."""

    def tick(self, job_id: str, now: datetime | None = None) -> list[Action]:
        """One reconcile round for one job. Returns the actions applied (for tests and logs)."""
        now = now or datetime.now(UTC)
        job = self.store.job(job_id)
        try:
            spec = stored_spec(job)
        except SpecError:
            if not job.status.terminal:
                raise  # the controller fails the job (see Controller.tick_job)
            self._stop_ended_nodes(job, load_state(self.store, job.id), _DEFAULT_GRACE_S)
            return []  # already ended for it: only stop leftovers
        UsageStore(self.store).ingest(job.id, now)  # new GPU monitor window summaries of the job's nodes
        state = self._finish_interrupted(job, load_state(self.store, job.id), spec, now)
        view, observed = self._view(job, state, spec, now)
        observed, budget_events = engine.note_budget(observed, spec.goals.budget_usd, now)
        self.draining[job.id] = view.draining
        actions = reconcile_and_explain(view)
        if actions or observed != state:
            self._apply(job, state, observed, spec, view, actions, now, budget_events)
        return actions

    def fail(self, job_id: str, reason: FailureReason, message: str, now: datetime) -> bool:
        """End a job the ticks cannot get past (an error in its data): FAILED with ``reason``, an event,
        its open segment closed and its nodes stopped. Returns False when the job had already ended."""
        job = self.store.job(job_id)
        state = load_state(self.store, job.id)
        if state.status.terminal:
            return False
        spec: JobSpec | None
        try:
            spec = stored_spec(job)
            grace = spec.checkpoint.notice_grace_seconds
        except SpecError:  # a broken spec: its own notify targets are lost, the team's still hear
            spec, grace = None, _DEFAULT_GRACE_S
        actions: list[Action] = [StopNodes((), grace, "failed")]
        if state.open_segment is not None:
            actions.append(CloseSegment("failed"))
        actions.append(Transition(JobStatus.FAILED, message, reason))
        alive = state.node_ids(NodeLaunch.INTENT) + state.node_ids(NodeLaunch.LAUNCHED)
        applied = engine.apply(actions, state, job.id, alive, now)
        with self.store.transaction() as conn:
            save_state(conn, job.id, state, applied.state, applied.events, now)
            notified = self._enqueue_notifications(conn, job, spec, state, applied.state, applied.events, now)
        self._notified(notified)
        try:
            self._carry_out(job, None, applied)
        except Exception:  # the next ticks stop nodes marked ended
            log.warning("job %s: stopping its nodes failed; retried next tick", job.id, exc_info=True)
        return True

    def _stop_ended_nodes(self, job: JobRecord, state: JobState, grace_s: float) -> None:
        ended = state.node_ids(NodeLaunch.ENDED)
        if ended:
            self.backend.stop(job.id, state.attempt, ended, grace_s)

    # --- 0. finish what a crash interrupted, and the backend's own duties -----------------------
    def _finish_interrupted(self, job: JobRecord, state: JobState, spec: JobSpec, now: datetime) -> JobState:
        """Launch the recorded intents, stop the nodes recorded as ended, let the backend do its duties."""
        if state.attempt == 0:
            return state
        intents = state.node_ids(NodeLaunch.INTENT)
        if intents and not state.status.terminal:
            state = self._launch(job, spec, state, intents)
        self._stop_ended_nodes(job, state, spec.checkpoint.notice_grace_seconds)
        spot = state.placement is not None and state.placement.market == MarketKind.SPOT.value
        grace = spec.checkpoint.notice_grace_seconds
        self.backend.tick(job.id, state.attempt, list(state.node_ids()), spot, grace, now)
        return state

    # --- 1. what the reconcile step sees ---------------------------------------------------------
    def _view(
        self, job: JobRecord, state: JobState, spec: JobSpec, now: datetime
    ) -> tuple[JobView, JobState]:
        """The reconcile step's view, and the state with what was observed of it (notices) recorded."""
        active_ids = [n.node_id for n in state.attempt_nodes if n.launch is not NodeLaunch.ENDED]
        observation = self.backend.observe(job.id, state.attempt, active_ids) if state.attempt else None
        ended_ids = list(state.node_ids(NodeLaunch.ENDED))
        ended_seen = self.backend.observe(job.id, state.attempt, ended_ids).nodes if ended_ids else ()
        draining = any(not n.phase.ended for n in ended_seen)
        seen = [*(observation.nodes if observation else ()), *ended_seen]
        observed = engine.record_notices(state, {n.node_id: n.notice_at for n in seen if n.notice_at})
        open_segment = state.open_segment
        progress = observation.progress if observation else None
        observed = engine.record_progress(observed, progress)
        fresh = bool(progress and progress.time and open_segment and progress.time >= open_segment.started_at)
        attempt_start = min(
            (s.started_at for s in state.segments if s.attempt == state.attempt), default=None
        )
        attempt_finished = bool(
            progress
            and progress.finished
            and progress.time
            and attempt_start
            and progress.time >= attempt_start
        )
        sizing = state.right_size
        market = self._market_view(
            job, spec, sizing.gpu_type if sizing and sizing.apply else None, state, now
        )
        placing = state.status in (JobStatus.PLACING, JobStatus.RECOVERING, JobStatus.RESCALING)
        measurements: tuple[GpuMeasurement, ...] = ()
        if placing and spec.policies.right_size is not RightSizeMode.OFF:
            measurements = gpu_measurements(self.store, job, now, monitor_usage(self.store))
        placement = engine.placement_of(state.placement)
        zone = placement.zone if placement else (market.zones[0].zone if market.zones else "")
        capacity = {z.zone: z.capacity for z in market.zones}
        view = JobView(
            spec=spec,
            status=state.status,
            now=now,
            submitted_at=job.submitted_at,
            deadline=job.deadline,
            attempt=state.attempt,
            placement=placement,
            nodes=observation.nodes if observation else (),
            open_segment_nodes=open_segment.nodes if open_segment else None,
            progress=progress,
            progress_fresh=fresh,
            attempt_finished=attempt_finished,
            draining=draining,
            preempted_in_attempt=observed.preempted_in_attempt
            or any(n.notice_at is not None for n in observed.attempt_nodes),
            spot_capacity=capacity[zone]
            if zone in capacity
            else self.backend.spot_capacity(job.id, zone, now),
            market=market,
            measurements=measurements,
            right_size_pick=sizing.gpu_type if sizing else None,
            cost_usd=state.cost_usd(now),
            restarts=state.restarts,
            preemptions=state.preemptions,
            cancel_requested=self.store.cancel_requested(job.id),
            segments=observed.segments,
            watch=observed.watch,
            gpu=UsageStore(self.store).activity(job.id) if state.status is JobStatus.RUNNING else None,
            waiting=observed.waiting,
        )
        return view, observed

    def _market_view(
        self, job: JobRecord, spec: JobSpec, sized_type: str | None, state: JobState, now: datetime
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
        log = self._market_log(job, spec, zones, build=not state.status.terminal)
        if not state.status.terminal:
            up = {z.zone: (z.capacity is None or z.capacity >= spec.resources.min_nodes) for z in zones}
            history = history.updated(tick_h, up)
            self.store.set_market_history(job.id, now, dataclasses.asdict(history))
            ZoneWatch(self.store).record({z.zone: z.capacity for z in zones}, now)
        run_h = run_hours(state.segments, spec, now)
        return MarketView(zones, found.on_demand, history, tick_h, run_h, market_log=log)

    def _market_log(
        self, job: JobRecord, spec: JobSpec, zones: Sequence[ZoneMarket], build: bool
    ) -> MarketLog | None:
        """The market the controller saw of the job's zones in the week before its submit: built at
        the job's first look (``build``: the job has not ended), then kept with the job (a restarted
        controller reads the same)."""
        if job.id in self._market_logs:
            return self._market_logs[job.id]
        watch = ZoneWatch(self.store)
        kept = watch.job_log(job.id)
        if kept is None and zones and build:
            names = [z.zone for z in zones]
            since = job.submitted_at - timedelta(hours=MARKET_LOG_H)
            spans = watch.spans(names, since, job.submitted_at)
            built = market_log_from(spans, names, spec.resources.min_nodes, job.submitted_at)
            watch.set_job_log(job.id, built.to_dict())
            kept = watch.job_log(job.id)
        if kept is None:
            return None
        self._market_logs[job.id] = MarketLog.from_dict(kept)
        return self._market_logs[job.id]

    # --- 2. apply: the engine's new state in one transaction; then its effects --------------------
    def _apply(
        self,
        job: JobRecord,
        loaded: JobState,
        observed: JobState,
        spec: JobSpec,
        view: JobView,
        actions: list[Action],
        now: datetime,
        budget_events: Sequence[JobEvent] = (),
    ) -> None:
        alive = [n.node_id for n in view.nodes if not n.phase.ended]
        applied = engine.apply(actions, observed, job.id, alive, now)
        notices = [
            JobEvent("preemption_notice", f"node {n.node_id} got the notice")
            for n, before in zip(observed.attempt_nodes, loaded.attempt_nodes, strict=False)
            if n.notice_at is not None and before.notice_at is None
        ]
        events = [*notices, *budget_events, *applied.events]
        with self.store.transaction() as conn:
            save_state(conn, job.id, loaded, applied.state, events, now)
            notified = self._enqueue_notifications(conn, job, spec, loaded, applied.state, events, now)
        self._notified(notified)
        self._carry_out(job, spec, applied)
        if applied.ended:
            self._write_summary(job.id, view)

    def _enqueue_notifications(
        self,
        conn: sqlite3.Connection,
        job: JobRecord,
        spec: JobSpec | None,
        old: JobState,
        new: JobState,
        events: Sequence[JobEvent],
        now: datetime,
    ) -> int:
        """The notifications of a tick's events, into the outbox inside the tick's transaction."""
        targets = self.notify.targets_for(job.team, spec.notify if spec is not None else ())
        if not targets or not events:
            return 0
        mode = spec.market.mode if spec is not None else MarketMode.SPOT_WITH_FALLBACK
        notes = notifications_for(JobRef(job.id, job.team, job.user), mode, old, new, events, now)
        return enqueue(conn, self.backend.name, addressed(targets, notes), now)

    def _notified(self, count: int) -> None:
        if count and self.on_notify is not None:
            self.on_notify()

    def _carry_out(self, job: JobRecord, spec: JobSpec | None, applied: engine.Applied) -> None:
        """The engine's effects, in order, after its state was committed."""
        state = applied.state
        for effect in applied.effects:
            if isinstance(effect, engine.StopNodes):
                self.backend.stop(job.id, effect.attempt, effect.node_ids, effect.grace_s)
            elif isinstance(effect, engine.LaunchNodes):
                assert spec is not None, "only a tick with a valid spec launches"
                state = self._launch(job, spec, state, effect.node_ids)
            elif isinstance(effect, engine.ReleaseNodes):
                pass  # processes and sbatch jobs free themselves; ended nodes are stopped every tick
            else:
                assert_never(effect)

    def _launch(self, job: JobRecord, spec: JobSpec, state: JobState, node_ids: Sequence[str]) -> JobState:
        """Hand intents to the backend (idempotent), then record them launched."""
        placement = engine.placement_of(state.placement)
        assert placement is not None
        job_dir = self.store.job_dir(job.id)
        request = LaunchRequest(
            job_id=job.id,
            attempt=state.attempt,
            spec=spec,
            placement=placement,
            node_ids=list(node_ids),
            min_nodes=spec.resources.min_nodes,
            max_nodes=spec.resources.max_nodes,
            checkpoint_dir=spec.checkpoint.path or str(job_dir / "checkpoints"),
            job_dir=job_dir,
            attempt_nodes=len(state.attempt_nodes),
        )
        self.backend.launch(request)
        launched = engine.mark_launched(state, node_ids)
        with self.store.transaction() as conn:
            save_state(conn, job.id, state, launched, [], datetime.now(UTC))
        return launched

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


def run_hours(segments: Sequence[SegmentState], spec: JobSpec, now: datetime) -> float:
    """Hours the job held nodes, less one changeover per attempt: its work done, when nothing better is known."""
    spans: dict[int, tuple[datetime, datetime]] = {}
    for seg in segments:
        end = seg.ended_at or now
        first, last = spans.get(seg.attempt, (seg.started_at, end))
        spans[seg.attempt] = (min(first, seg.started_at), max(last, end))
    change_h = changeover_hours(spec)
    return sum(max(0.0, (last - first).total_seconds() / 3600.0 - change_h) for first, last in spans.values())
