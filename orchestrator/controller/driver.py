"""The local and SLURM side of the one host: the job's state in the SQL store, effects through the backend.

:func:`orchestrator.controller.host.run_tick` runs a job's tick for every backend; the :class:`Driver`
supplies, per job (:class:`SqlJob`), where its :class:`JobState` lives (the store's rows, read and
written by :mod:`orchestrator.state.state_rows`) and how it is observed and acted on (the
:class:`~orchestrator.backends.base.Backend`: processes, sbatch jobs), and the market it knows (each
zone's spot capacity, the zone watch's log).

Crash safety comes from ordering. All state changes of one tick are written in one transaction
*before* any side effect; nodes are written as ``intent`` first and launched after the commit.
Every tick starts by finishing what a crash may have interrupted: intents are launched (the backend's
launch is idempotent) and nodes the controller has ended but that still run are stopped. So killing
the controller at any instant loses nothing and launches nothing twice. In a controller round
(:meth:`Driver.round`) the rows of its jobs are read at once (:meth:`Driver.read_round`), and on
PostgreSQL the ticks that only recorded what they observed (no effect to follow) write their rows
together at the round's end, each fenced by its lease, in one round trip.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, Protocol, assert_never

from sqlalchemy import Connection

from orchestrator.backends.base import Backend, LaunchRequest
from orchestrator.controller import engine, host
from orchestrator.controller.actions import Action
from orchestrator.controller.host import run_hours
from orchestrator.controller.market_choice import MarketView, ZoneMarket
from orchestrator.controller.measurements import gpu_measurements, monitor_usage
from orchestrator.controller.placement import Candidates, candidates_for
from orchestrator.controller.reconcile import JobView
from orchestrator.controller.user_ledger import UserLedger
from orchestrator.costs.budgets import CostConfig
from orchestrator.errors import SpecError
from orchestrator.notify import JobRef, Notification, NotifyConfig, addressed, enqueue, notifications_for
from orchestrator.policies import GpuMeasurement
from orchestrator.policies.context import MarketLog
from orchestrator.policies.daily import MARKET_LOG_H
from orchestrator.policies.market_log import market_log_from
from orchestrator.spec import Checkpoint, JobSpec, MarketMode, spec_from_json
from orchestrator.spec import RightSize as RightSizeMode
from orchestrator.state.job_dir import JobDir
from orchestrator.state.job_state import JobState, NodeLaunch, ZoneMemory
from orchestrator.state.leases import Fence
from orchestrator.state.records import JobRecord
from orchestrator.state.round_rows import round_rows
from orchestrator.state.state_rows import RowWrite, load_state, row_write, save_row, save_rows, save_state
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobRows, JobStore
from orchestrator.state.usage import UsageStore
from orchestrator.state.watch import GpuActivity
from orchestrator.state.zone_watch import ZoneWatch

log = logging.getLogger(__name__)


class Unread(Enum):
    UNREAD = "unread"


_UNREAD = Unread.UNREAD
"""Not read with the round: the tick reads it itself."""


@dataclass(frozen=True)
class RoundRead:
    """What a round read of one job for its tick (:meth:`Driver.read_round`)."""

    rows: JobRows
    activity: GpuActivity | None
    """Its GPU activity when it is RUNNING (None: no window yet, or not running)."""


class Fencing(Protocol):
    """The lease check of a job's writes (:class:`~orchestrator.controller.leases.LeaseKeeper`)."""

    def fence(self, conn: Connection, job_id: str) -> None:
        """First in a write transaction: :class:`LeaseLost` unless the lease still holds."""
        ...

    def fence_of(self, job_id: str) -> Fence:
        """What a write of ``job_id`` that is one statement checks (:class:`LeaseLost` when not held)."""
        ...


class Driver:
    """The local and SLURM side of the one host (:mod:`orchestrator.controller.host`): the job's state
    in the SQL store's rows, its effects through the backend (processes, sbatch jobs).

    ``notify``: the teams' notification targets (a job's own come with its spec); a tick's
    notifications are added to the store's outbox in the tick's transaction, then ``on_notify`` is
    called (it wakes the delivery worker: the tick never waits on the network)."""

    def __init__(
        self,
        store: JobStore,
        backend: Backend,
        notify: NotifyConfig | None = None,
        on_notify: Callable[[], None] | None = None,
        costs: CostConfig | None = None,
        tick_s: float = host.TICK_SECONDS,
    ) -> None:
        self.store = store
        self.tick_s = tick_s
        """The controller's interval between passes: the policy's tick is never shorter."""
        self.backend = backend
        self.notify = notify or NotifyConfig()
        self.on_notify = on_notify
        self.users = UserLedger(store, costs or CostConfig())
        """Where each job's user stands against its limits (``costs``: the controller config's budgets)."""
        self._candidates: dict[tuple[str, str | None], Candidates] = {}
        self.zone_watch = ZoneWatch(store)
        """The market log, written once per zone for all the jobs ticked together
        (:data:`~orchestrator.state.zone_watch.REWRITE_S`)."""
        self._market_logs: dict[str, MarketLog] = {}
        """Job id -> its kept market log (read from the store once; it never changes)."""
        self.draining: dict[str, bool] = {}
        """Job id -> nodes the controller has ended still run (seen at the job's last tick)."""
        self._deferred: dict[str, RowWrite] | None = None
        """The row writes of the open :meth:`round` (None: no round open, each tick writes its own)."""
        self.fence: Fencing | None = None
        """The controller's lease check (:mod:`orchestrator.controller.leases`), run first in each
        write of a job's tick: raising rolls the write back, and no effect follows."""

    @contextmanager
    def _write(self, job_id: str) -> Iterator[Connection]:
        """A write transaction of ``job_id``'s tick, fenced by :attr:`fence`."""
        self._undefer(job_id)
        with self.store.transaction() as conn:
            if self.fence is not None:
                self.fence.fence(conn, job_id)
            yield conn

    def read_round(self, job_ids: Sequence[str]) -> dict[str, RoundRead]:
        """What the ticks of ``job_ids`` read of the store, for all of them at once (a round: a few
        queries, not a few per job). Read only once the controller holds their leases: no other
        controller writes them after that."""
        rows = round_rows(self.store, job_ids)
        running = [job_id for job_id, r in rows.items() if r.record.status is JobStatus.RUNNING]
        activity = UsageStore(self.store).every_activity(running) if running else {}
        return {job_id: RoundRead(r, activity.get(job_id)) for job_id, r in rows.items()}

    def tick(self, job_id: str, now: datetime | None = None, read: RoundRead | None = None) -> list[Action]:
        """One tick of one job (:func:`host.run_tick`). Returns the actions applied (for tests and logs).
        ``read``: the job's rows as :meth:`read_round` read them (None: read them now)."""
        with self.store.pinned():  # one connection for the tick's reads and its writes
            return self._tick(job_id, now or datetime.now(UTC), read)

    def _tick(self, job_id: str, now: datetime, read: RoundRead | None) -> list[Action]:
        # the row, options, cancel request and placement at once (with nodes and segments in a round)
        rows = read.rows if read is not None else self.store.job_rows(job_id)
        job = rows.record if rows is not None else self.store.job(job_id)
        try:
            spec = stored_spec(job)
        except SpecError:
            if not job.status.terminal:
                raise  # the controller fails the job (see Controller.tick_job)
            self._stop_ended_nodes(job, load_state(self.store, job.id), _DEFAULT_GRACE_S)
            return []  # already ended for it: only stop leftovers
        stored = UsageStore(self.store).ingest(job.id, now)  # new GPU monitor windows of the job's nodes
        activity = read.activity if read is not None and not stored else _UNREAD
        tick = host.run_tick(SqlJob(self, job, spec, rows, activity), now)
        if tick.actions:
            self.users.changed()
        self.draining[job.id] = tick.view.draining
        return list(tick.actions)

    def fail(self, job_id: str, reason: FailureReason, message: str, now: datetime) -> bool:
        """End a job the ticks cannot get past (an error in its data): :func:`host.fail`, its
        notifications, then its nodes stopped. Returns False when the job had already ended."""
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
        applied = host.fail(state, job.id, reason, message, now, grace)
        mode = spec.market.mode if spec is not None else MarketMode.SPOT_WITH_FALLBACK
        notes = notifications_for(_ref(job), mode, state, applied.state, applied.events, now)
        with self._write(job.id) as conn:
            save_state(conn, job.id, state, applied.state, applied.events, now)
            notified = self._enqueue(conn, job, spec, notes, now)
        self._notified(notified)
        try:
            self._carry_out(job, None, applied.state, applied.effects)
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
        spot = state.placement is not None and state.placement.spot
        grace = spec.checkpoint.notice_grace_seconds
        self.backend.tick(job.id, state.attempt, list(state.node_ids()), spot, grace, now)
        return state

    # --- 1. what the backend and the store say of the job now -----------------------------------
    def _observe(
        self,
        job: JobRecord,
        state: JobState,
        spec: JobSpec,
        now: datetime,
        cancel: bool | None = None,
        activity: GpuActivity | Unread | None = _UNREAD,
    ) -> host.Observation:
        """``cancel``: whether a cancel was requested, when the tick has read it (None: read it now);
        ``activity``: the job's GPU activity, when the round has read it."""
        active_ids = [n.node_id for n in state.attempt_nodes if n.launch is not NodeLaunch.ENDED]
        observation = self.backend.observe(job.id, state.attempt, active_ids) if state.attempt else None
        ended_ids = list(state.node_ids(NodeLaunch.ENDED))
        ended_seen = self.backend.observe(job.id, state.attempt, ended_ids).nodes if ended_ids else ()
        seen = [*(observation.nodes if observation else ()), *ended_seen]
        sizing = state.right_size
        market, memory = self._market_view(
            job, spec, sizing.gpu_type if sizing and sizing.apply else None, state, now
        )
        placing = state.status in (JobStatus.PLACING, JobStatus.RECOVERING, JobStatus.RESCALING)
        measurements: tuple[GpuMeasurement, ...] = ()
        if placing and spec.policies.right_size is not RightSizeMode.OFF:
            measurements = gpu_measurements(self.store, job, now, monitor_usage(self.store))
        placement = state.placement
        zone = placement.zone if placement else (market.zones[0].zone if market.zones else "")
        capacity = {z.zone: z.capacity for z in market.zones}
        running = state.status is JobStatus.RUNNING
        return host.Observation(
            nodes=observation.nodes if observation else (),
            notices={n.node_id: n.notice_at for n in seen if n.notice_at},
            draining=any(not n.phase.ended for n in ended_seen),
            progress=observation.progress if observation else None,
            market=market,
            zone_history=memory,
            spot_capacity=capacity[zone]
            if zone in capacity
            else self.backend.spot_capacity(job.id, zone, now),
            measurements=measurements,
            gpu=self._activity(job, activity) if running else None,
            cancel_requested=self.store.cancel_requested(job.id) if cancel is None else cancel,
            user=self.users.standing(job, now),
        )

    def _activity(self, job: JobRecord, activity: GpuActivity | Unread | None) -> GpuActivity | None:
        return UsageStore(self.store).activity(job.id) if activity is _UNREAD else activity

    def _market_view(
        self, job: JobRecord, spec: JobSpec, sized_type: str | None, state: JobState, now: datetime
    ) -> tuple[MarketView, ZoneMemory | None]:
        """Every zone's spot offer and capacity now, and the availability history with this look added
        (None once the job ended: the history is kept as it was).

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
        memory, kept = state.zone_history, state.zone_history
        tick_h = host.decision_tick_h(kept, now, self.tick_s)
        log = self._market_log(job, spec, zones, build=not state.status.terminal)
        if not state.status.terminal:
            up = {z.zone: (z.capacity is None or z.capacity >= spec.resources.min_nodes) for z in zones}
            memory, _ = host.watched(kept, up, now)
            self.zone_watch.record({z.zone: z.capacity for z in zones}, now)
        run_h = run_hours(state.segments, spec, now)
        market = MarketView(zones, found.on_demand, host.zone_history(memory), tick_h, run_h, market_log=log)
        return market, memory if memory is not kept else None

    def _market_log(
        self, job: JobRecord, spec: JobSpec, zones: Sequence[ZoneMarket], build: bool
    ) -> MarketLog | None:
        """The market the controller saw of the job's zones in the week before its submit: built at
        the job's first look (``build``: the job has not ended), then kept with the job (a restarted
        controller reads the same)."""
        if job.id in self._market_logs:
            return self._market_logs[job.id]
        watch = self.zone_watch
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

    # --- 2. persist: the tick's state in one transaction; then its effects ------------------------
    def _persist(self, job: JobRecord, spec: JobSpec, tick: host.Tick, now: datetime) -> None:
        if not tick.changed:
            return
        write = self._row_write(job.id, tick, now)
        if write is not None:
            if self._deferred is not None and not (tick.actions or tick.effects):
                self._deferred[job.id] = write  # what it observed alone: written with the round's others
            else:
                self._undefer(job.id)
                save_row(self.store, write)
            return
        with self._write(job.id) as conn:
            save_state(conn, job.id, tick.loaded, tick.state, tick.events, now)
            notified = self._enqueue(conn, job, spec, tick.notifications, now)
        self._notified(notified)

    def _row_write(self, job_id: str, tick: host.Tick, now: datetime) -> RowWrite | None:
        """The tick's write as one fenced statement, where it can be (:func:`row_write`)."""
        if self.fence is None or self.store.sqlite or tick.notifications:
            return None
        fence = self.fence.fence_of(job_id)
        return row_write(self.store, job_id, tick.loaded, tick.state, tick.events, now, fence)

    def _undefer(self, job_id: str) -> None:
        """A write of ``job_id`` made now supersedes its row write left for the round's end (which
        would set its row back to what that earlier tick saw)."""
        if self._deferred:
            self._deferred.pop(job_id, None)

    @contextmanager
    def round(self) -> Iterator[set[str]]:
        """A controller round (PostgreSQL): the ticks that only record what they observed (no action,
        no effect, no event: a running job's progress, zone history, watch) write their job's row when
        the round ends, all in one round trip (:func:`save_rows`), not one each; every other write is
        made in its tick, before its effects, as always. The set yielded holds, after the block, the
        jobs whose lease no longer held at that write (nothing of theirs was written). A crash before
        the round's end loses those ticks' records alone, as a crash before any tick's write does:
        the next tick observes again."""
        lost: set[str] = set()
        self._deferred = {}
        try:
            yield lost
        finally:
            deferred, self._deferred = self._deferred, None
            if deferred:
                written = save_rows(self.store, list(deferred.values()))
                lost.update(set(deferred) - written)

    def _enqueue(
        self,
        conn: Connection,
        job: JobRecord,
        spec: JobSpec | None,
        notes: Sequence[Notification],
        now: datetime,
    ) -> int:
        """A tick's notifications, into the outbox inside the tick's transaction."""
        targets = self.notify.targets_for(job.team, spec.notify if spec is not None else ())
        if not targets or not notes:
            return 0
        return enqueue(conn, self.backend.name, addressed(targets, notes), now)

    def _notified(self, count: int) -> None:
        if count and self.on_notify is not None:
            self.on_notify()

    def _carry_out(
        self, job: JobRecord, spec: JobSpec | None, state: JobState, effects: Sequence[engine.Effect]
    ) -> None:
        """The engine's effects, in order, after its state was committed."""
        for effect in effects:
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
        placement = state.placement
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
            checkpoint_dir=spec.checkpoint.path or str(JobDir(job_dir).checkpoints),
            job_dir=job_dir,
            attempt_nodes=len(state.attempt_nodes),
            deadline=job.deadline,
        )
        if self.fence is not None:  # a controller that lost the job starts none of its nodes
            with self._write(job.id):
                pass
        self.backend.launch(request)
        launched = engine.mark_launched(state, node_ids)
        with self._write(job.id) as conn:
            save_state(conn, job.id, state, launched, [], datetime.now(UTC))
        return launched

    def _write_summary(self, job_id: str, view: JobView) -> None:
        progress = view.progress
        summary: dict[str, Any] = {}
        if progress is not None:
            summary = {"step": progress.step, "loss": progress.loss, "metrics": dict(progress.metrics)}
        self.store.set_summary(job_id, summary)


class SqlJob:
    """One job of the SQL store on the driver's backend: the host's :class:`~host.JobSide` for local
    and SLURM."""

    def __init__(
        self,
        driver: Driver,
        job: JobRecord,
        spec: JobSpec,
        rows: JobRows | None = None,
        activity: GpuActivity | Unread | None = _UNREAD,
    ) -> None:
        self.driver, self.job, self.spec = driver, job, spec
        self._activity = activity
        self.job_id = job.id
        self.submitted_at = job.submitted_at
        self.ref = _ref(job)
        self.max_passes = 1
        """One reconcile per tick: the local and SLURM controllers tick every few seconds."""
        self._record: JobRecord | JobRows | None = rows if rows is not None and rows.record is job else job
        """The job's rows as the tick began, for its first load (read once, not twice)."""
        self._cancel = rows.cancel_requested if rows is not None else None

    def load(self) -> JobState:
        record, self._record = self._record, None
        return load_state(self.driver.store, self.job.id, record)

    def finish_interrupted(self, state: JobState, now: datetime) -> JobState:
        return self.driver._finish_interrupted(self.job, state, self.spec, now)

    def observe(self, state: JobState, now: datetime) -> host.Observation:
        return self.driver._observe(self.job, state, self.spec, now, self._cancel, self._activity)

    def persist(self, tick: host.Tick, now: datetime) -> None:
        self.driver._persist(self.job, self.spec, tick, now)

    def carry_out(self, tick: host.Tick) -> None:
        self.driver._carry_out(self.job, self.spec, tick.state, tick.effects)
        if tick.ended:
            self.driver._write_summary(self.job.id, tick.view)


def _ref(job: JobRecord) -> JobRef:
    return JobRef(job.id, job.team, job.user)


_DEFAULT_GRACE_S = Checkpoint().notice_grace_seconds


def stored_spec(job: JobRecord) -> JobSpec:
    """The job's spec as stored at submission; :class:`SpecError` when it no longer validates."""
    return spec_from_json(job.spec_json, source=f"stored spec of job {job.id}")


__all__ = ["Driver", "Fencing", "RoundRead", "SqlJob", "run_hours", "stored_spec"]
