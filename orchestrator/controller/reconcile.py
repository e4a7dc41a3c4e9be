"""The reconcile step: a pure function of the job's spec, what was observed, and the time.

``reconcile(view) -> list[Action]`` reads as numbered steps with early returns. It performs no I/O:
the driver gathers a :class:`JobView`, calls it, and applies the actions through the store and the
backend. The same inputs always give the same actions, which is what the unit tests check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.backends.base import NodeObservation, NodePhase, Placement, Progress
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
    SetWaiting,
    StartAttempt,
    StopNodes,
    Transition,
)
from orchestrator.controller.market_choice import (
    JobClock,
    MarketChoice,
    MarketRefusal,
    MarketView,
    MarketWait,
    ZoneMarket,
    changeover_hours,
    choose_market,
    leave_on_demand,
)
from orchestrator.controller.waiting import why_waiting
from orchestrator.controller.watchdog import watch_actions
from orchestrator.costs.user_limits import UserStanding, month_exceeded, nodes_within_cap, slot_wait
from orchestrator.errors import GpuctlError
from orchestrator.policies import GpuMeasurement, right_size
from orchestrator.spec import JobSpec, MarketMode
from orchestrator.spec import RightSize as RightSizeMode
from orchestrator.state.job_state import SegmentState
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.watch import GpuActivity, WaitReason, WatchState

S = JobStatus

LINGER_AFTER_FINISHED_S = 30.0
"""After training wrote its final record, nodes still running this long are stopped (the job succeeded)."""


@dataclass(frozen=True)
class JobView:
    """Everything the reconcile step may look at, gathered by the driver."""

    spec: JobSpec
    status: JobStatus
    now: datetime
    submitted_at: datetime
    deadline: datetime | None
    attempt: int
    placement: Placement | None
    """Placement of the current attempt (None before the first)."""
    nodes: tuple[NodeObservation, ...] = ()
    """Nodes of the current attempt that have not been marked ended."""
    open_segment_nodes: int | None = None
    progress: Progress | None = None
    progress_fresh: bool = False
    """``progress`` was written after the current segment opened (the new world is training)."""
    attempt_finished: bool = False
    """Training wrote its "finished" line during the current attempt: the job's work is done, whatever
    happened to its nodes since (a stop the controller sent while it was down, say)."""
    draining: bool = False
    """Nodes the controller already ended are still running (saving their emergency checkpoint)."""
    preempted_in_attempt: bool = False
    """Some node of this attempt was reclaimed by the market (so other nodes' failures are collateral)."""
    spot_capacity: int | None = None
    """Spot nodes the market offers now in the candidate zone (None: no limit known)."""
    spot: Placement | None = None
    on_demand: Placement | None = None
    market: MarketView | None = None
    """Every zone's spot offer and capacity, and the history the market policy reads. None: one zone,
    made of ``spot``, ``on_demand`` and ``spot_capacity``."""
    measurements: tuple[GpuMeasurement, ...] = ()
    """What runs of this job measured per GPU type (read only when ``policies.right_size`` is on)."""
    right_size_pick: str | None = None
    """The GPU type right-size picked last (recommended or applied)."""
    cost_usd: float = 0.0
    restarts: int = 0
    preemptions: int = 0
    cancel_requested: bool = False
    segments: tuple[SegmentState, ...] = ()
    """The job's segments (the open one last): what it spent, and its current price for forecasts."""
    watch: WatchState = field(default_factory=WatchState)
    """Step samples of the open segment and the alerts already raised."""
    gpu: GpuActivity | None = None
    """What the GPU monitors measured lately (None: nothing yet)."""
    waiting: WaitReason | None = None
    """Why the job waits, as recorded last."""
    user: UserStanding | None = None
    """Where the job's user stands against its limits (None: the user has none)."""

    @property
    def segment_started_at(self) -> datetime | None:
        """When the open segment started (None: no segment is open)."""
        if self.open_segment_nodes is None or not self.segments or self.segments[-1].ended_at is not None:
            return None
        return self.segments[-1].started_at


def reconcile_and_explain(view: JobView) -> list[Action]:
    """:func:`reconcile`, and for a job it leaves waiting, why (a ``SetWaiting`` when that changed).
    What the hosts call; the reason never changes the decision."""
    actions = reconcile(view)
    if view.status.terminal or view.cancel_requested or any(isinstance(a, Transition) for a in actions):
        return actions
    found = why_waiting(view, market_view(view))
    if found is None:
        return actions
    code, message = found
    if view.waiting is None or (view.waiting.code, view.waiting.message) != (code, message):
        actions.append(SetWaiting(code, message))
    return actions


def reconcile(view: JobView) -> list[Action]:
    spec = view.spec
    # 1. Terminal jobs need nothing.
    if view.status.terminal:
        return []
    # 2. Cancel wins over everything else.
    if view.cancel_requested:
        return [
            StopNodes((), spec.checkpoint.notice_grace_seconds, "cancelled"),
            *_close(view, "cancelled"),
            Transition(S.CANCELLED, "cancelled by the user"),
        ]
    # 3. A new job starts placing, unless its user's month is spent or its user runs max_jobs already.
    if view.status is S.PENDING:
        over = _user_over(view)
        if over:
            return over
        if view.user is not None and slot_wait(view.user):
            return []  # keep waiting; the driver shows the reason
        return [Transition(S.PLACING, "choosing GPU type, market and zone")]
    # 4. After a preemption, recover.
    if view.status is S.PREEMPTED:
        return [Transition(S.RECOVERING, "resuming from the newest checkpoint on a new placement")]
    # 5. Placing (first time, after a loss, or to grow): wait for old nodes to save, then pick a market.
    if view.status in (S.PLACING, S.RECOVERING) or (view.status is S.RESCALING and not view.nodes):
        if view.draining:
            return []
        if view.attempt_finished:  # finished before the stop that sent it here took effect: never rerun
            return [*_close(view, "finished"), Transition(S.SUCCEEDED, "training finished")]
        return _place(view)
    # 6. Running: react to what the nodes did.
    return _follow(view)


def _place(view: JobView) -> list[Action]:
    spec = view.spec
    if view.deadline is not None and view.now >= view.deadline:
        return [
            Transition(
                S.FAILED, "the deadline passed before the job could finish", FailureReason.DEADLINE_IMPOSSIBLE
            )
        ]
    budget = spec.goals.budget_usd
    if budget is not None and view.cost_usd >= budget:
        return [
            Transition(
                S.FAILED, f"spent {view.cost_usd:.2f} of a {budget:.2f} USD budget", FailureReason.OVER_BUDGET
            )
        ]
    over = _user_over(view)
    if over:
        return over
    sized = _right_size(view)
    if sized is not None:
        return [sized]
    choice = choose_market(spec, market_view(view), _clock(view))
    if isinstance(choice, MarketRefusal):
        return [Transition(S.FAILED, choice.why, FailureReason.NO_CAPACITY)]
    if isinstance(choice, MarketWait):
        if view.status in (S.PLACING, S.RESCALING) and view.attempt > 0:
            return [Transition(S.RECOVERING, choice.why)]
        return []  # keep waiting; the driver shows the reason
    return _launch(view, choice)


def _launch(view: JobView, choice: MarketChoice) -> list[Action]:
    spec = view.spec
    cap = spec.market.max_hourly_usd
    hourly = choice.placement.node_price_usd_per_hour * choice.nodes
    if cap is not None and hourly > cap:
        return [
            Transition(
                S.FAILED,
                f"the cheapest placement costs {hourly:.2f} USD/h, above max_hourly_usd {cap:.2f}; "
                "raise market.max_hourly_usd or allow other GPU types",
                FailureReason.OVER_BUDGET,
            )
        ]
    price = choice.placement.node_price_usd_per_hour
    nodes = nodes_within_cap(view.user, price, choice.nodes, spec.resources.min_nodes)
    if nodes == 0:
        return []  # the user's hourly cap: wait for room (the driver shows the reason)
    capped = f" (user's hourly cap: {nodes} of {choice.nodes} node(s))" if nodes < choice.nodes else ""
    return [
        Transition(S.LAUNCHING, f"{nodes} x {choice.placement.gpu_type} {choice.placement.market} "
                   f"in {choice.placement.zone}: {choice.why}{capped}"),
        StartAttempt(choice.placement, nodes),
    ]  # fmt: skip


def _follow(view: JobView) -> list[Action]:
    spec = view.spec
    nodes = view.nodes
    grace = spec.checkpoint.notice_grace_seconds
    ended = [n for n in nodes if n.phase.ended]
    alive = [n for n in nodes if not n.phase.ended]
    succeeded = [n for n in nodes if n.phase is NodePhase.SUCCEEDED]
    gone = [n for n in ended if n.phase in (NodePhase.PREEMPTED, NodePhase.LOST)]  # with or without a notice
    failed = [n for n in ended if n.phase is NodePhase.FAILED]
    finished = view.progress is not None and view.progress.finished
    # The runtime writes "finished" after the final checkpoint: from then on this attempt's work is done,
    # whatever ends its nodes (a notice, a reclaim, a node lost while the controller was down).
    done = finished and view.progress_fresh

    # 6a. Success: every node exited 0 (an elastic survivor may finish alone), or training finished in
    #     this attempt and every node has ended since, reclaimed or not: a finished job is never run again.
    if (
        nodes
        and not alive
        and ((succeeded and (len(succeeded) == len(nodes) or finished)) or (done and (succeeded or gone)))
    ):
        return [
            *_close(view, "finished"),
            MarkNodesEnded(_ids(ended)),
            Transition(S.SUCCEEDED, "training finished"),
        ]
    # 6a'. Training finished and nodes are still exiting: wait for them; a loss now is not a preemption.
    #      Nodes still there LINGER_AFTER_FINISHED_S later (a worker hung at exit, or torchrun's exit
    #      barrier, can hold an agent for good) only cost money: the final checkpoint is saved, so
    #      stop them and succeed.
    if done and alive:
        finished_at = view.progress.time if view.progress is not None else None
        if finished_at is None or (view.now - finished_at).total_seconds() < LINGER_AFTER_FINISHED_S:
            return []
        return [
            StopNodes(_ids(alive), spec.checkpoint.notice_grace_seconds, "lingering after training finished"),
            *_close(view, "finished"),
            MarkNodesEnded(_ids(nodes)),
            Transition(S.SUCCEEDED, f"training finished; {len(alive)} node(s) still running "
                       f"{LINGER_AFTER_FINISHED_S:.0f} s later were stopped"),
        ]  # fmt: skip

    # 6b. Budget: stop with a checkpoint once the money is spent.
    budget = spec.goals.budget_usd
    if budget is not None and view.cost_usd >= budget:
        return [
            StopNodes((), grace, "over budget"),
            *_close(view, "over budget"),
            MarkNodesEnded(_ids(nodes)),
            Transition(
                S.FAILED, f"spent {view.cost_usd:.2f} of a {budget:.2f} USD budget", FailureReason.OVER_BUDGET
            ),
        ]
    # 6b'. The user's month is spent: the same stop, for every job of the user.
    over = _user_over(view)
    if over:
        return [StopNodes((), grace, "user over budget"), *_close(view, "over budget"),
                MarkNodesEnded(_ids(nodes)), *over]  # fmt: skip

    # 6c. The market took nodes (or nodes vanished): rescale or recover. Nodes that never left the
    #     queue (a Kubernetes spot shortage: pods never scheduled) held nothing: their segment is free.
    if gone or (failed and view.preempted_in_attempt):
        free: list[Action] = [SegmentStartsNow()] if all(n.queued for n in nodes) else []
        if spec.resources.elastic and spec.policies.rescale and len(alive) >= spec.resources.min_nodes:
            return [
                CountPreemption(),
                *free,
                *_close(view, "node lost"),
                MarkNodesEnded(_ids(ended)),
                OpenSegment(len(alive)),
                Transition(S.RESCALING, f"lost {len(ended)} node(s); continuing on {len(alive)}"),
            ]
        ending = [CountPreemption(), StopNodes(_ids(alive), grace, "attempt preempted"), *free,
                  *_close(view, "preempted"), MarkNodesEnded(_ids(nodes))]  # fmt: skip
        limit = spec.recovery.max_preemptions
        if limit is not None and view.preemptions + 1 > limit:
            why = f"preempted {view.preemptions + 1} times, more than recovery.max_preemptions ({limit})"
            return [*ending, Transition(S.FAILED, why, FailureReason.TOO_MANY_RESTARTS)]
        return [
            *ending,
            Transition(S.PREEMPTED, f"{len(gone) or len(failed)} node(s) reclaimed by the market"),
        ]

    # 6d. The training command failed on its own: retry within max_restarts.
    if failed:
        codes = sorted({n.exit_code for n in failed if n.exit_code is not None})
        retry_codes = spec.recovery.retry_exit_codes
        retryable = not retry_codes or any(c in retry_codes for c in codes)
        common = [
            StopNodes(_ids(alive), 0.0, "a node failed"),
            *_close(view, "failed"),
            MarkNodesEnded(_ids(nodes)),
        ]
        if not retryable:
            return [
                *common,
                Transition(S.FAILED, f"training exited with {codes}", FailureReason.USER_CODE_ERROR),
            ]
        if view.restarts >= spec.recovery.max_restarts:
            return [
                *common,
                Transition(S.FAILED, f"training failed {view.restarts + 1} times (exit codes {codes}); "
                           "see `gpuctl logs JOB`", FailureReason.TOO_MANY_RESTARTS),
            ]  # fmt: skip
        return [
            *common,
            CountRestart(),
            Transition(S.RECOVERING, f"training exited with {codes}; restarting"),
        ]

    # 6d'. The watchdog (a stall, idle GPUs) and the forecasts (deadline or budget at risk), while running.
    watched = watch_actions(view)
    if any(isinstance(a, Transition) for a in watched):
        return watched

    # 6e. Still queued (SLURM PENDING): queue time is free, so the segment starts when the nodes do.
    if view.status is S.LAUNCHING and alive and all(n.queued for n in alive) and view.open_segment_nodes:
        return [SegmentStartsNow()]

    # 6f. Elastic growth: capacity came back. Every node saves a checkpoint and exits, then step 5
    #     relaunches on more nodes (re-rendezvous of a growing torchrun world proved unreliable).
    if not succeeded and not finished and _growth(view, len(alive)) > 0:
        why = f"capacity returned; restarting on up to {spec.resources.max_nodes} node(s) from a checkpoint"
        return [
            StopNodes(_ids(alive), grace, "growing"),
            *_close(view, "rescaled"),
            MarkNodesEnded(_ids(nodes)),
            Transition(S.RESCALING, why) if view.status is not S.RESCALING else RecordEvent("rescale", why),
        ]

    # 6g. On on-demand, the market policy may send the job back to spot (or to waiting, when free):
    #     every node checkpoints and exits, then step 5 places it again.
    if view.status is S.RUNNING and view.placement is not None and not succeeded and not finished:
        move = leave_on_demand(spec, market_view(view), _clock(view), view.placement)
        if move is not None:
            return [
                StopNodes(_ids(alive), grace, "leaving on-demand"),
                *_close(view, "left on-demand"),
                MarkNodesEnded(_ids(nodes)),
                Transition(S.RECOVERING, move),
            ]

    # 6h. Training is under way.
    if view.status in (S.LAUNCHING, S.RESCALING) and view.progress is not None and view.progress_fresh:
        return [Transition(S.RUNNING, f"training at step {view.progress.step} on {len(alive)} node(s)")]
    return watched


def _growth(view: JobView, alive: int) -> int:
    spec = view.spec
    placement = view.placement
    if placement is None or not (spec.resources.elastic and spec.policies.rescale):
        return 0
    room = spec.resources.max_nodes - alive
    if view.user is not None:  # the user's hourly cap, beside this job's running nodes
        extra = nodes_within_cap(view.user, placement.node_price_usd_per_hour, spec.resources.max_nodes, 0)
        room = min(room, extra - alive)
    if room <= 0:
        return 0
    if not placement.spot or view.spot_capacity is None:
        return room
    return max(0, min(room, view.spot_capacity - alive))


def _user_over(view: JobView) -> list[Action]:
    """The job's user spent its month: FAILED (over_budget); else nothing."""
    why = month_exceeded(view.user) if view.user is not None else None
    return [Transition(S.FAILED, why, FailureReason.OVER_BUDGET)] if why else []


def _right_size(view: JobView) -> RightSize | None:
    """With ``policies.right_size`` on: the cheapest measured GPU type that meets the deadline.

    ``recommend`` records it (once per pick) and changes nothing; ``auto`` also places the job on it.
    Only the allowed ``gpu_types`` that runs of this job measured are candidates.
    """
    spec = view.spec
    mode = spec.policies.right_size
    progress = view.progress
    allowed = [m for m in view.measurements if m.gpu_type in spec.resources.gpu_types]
    if mode is RightSizeMode.OFF or not allowed or progress is None or not progress.total_steps:
        return None
    steps_left = progress.total_steps - progress.step
    if steps_left <= 0:
        return None
    hours_left = math.inf
    if view.deadline is not None:
        hours_left = (view.deadline - view.now).total_seconds() / 3600.0 - changeover_hours(spec)
    market = MarketKind.ON_DEMAND if spec.market.mode is MarketMode.ON_DEMAND else MarketKind.SPOT
    try:
        choice = right_size(
            allowed, float(steps_left), hours_left, market=market, max_nodes=spec.resources.max_nodes
        )
    except GpuctlError:
        return None  # nothing measured fits: place as the spec says
    pick = choice.choice.offer.gpu_type
    if pick == view.right_size_pick:
        return None
    return RightSize(pick, mode is RightSizeMode.AUTO, f"right-size ({mode}): {choice.reason}")


def market_view(view: JobView) -> MarketView:
    if view.market is not None:
        return view.market
    zones = () if view.spot is None else (ZoneMarket(view.spot.zone, view.spot, view.spot_capacity),)
    return MarketView(zones, view.on_demand)


def _clock(view: JobView) -> JobClock:
    return JobClock(view.now, view.submitted_at, view.deadline, view.progress, view.watch)


def _close(view: JobView, reason: str) -> list[Action]:
    return [CloseSegment(reason)] if view.open_segment_nodes is not None else []


def _ids(nodes: list[NodeObservation] | tuple[NodeObservation, ...]) -> tuple[str, ...]:
    return tuple(n.node_id for n in nodes)


__all__ = ["JobView", "reconcile", "reconcile_and_explain"]
