"""Ledger arithmetic: what each job cost, what on-demand would have cost, idle waste and lost work.

All functions work on plain sequences of :class:`JobRecord` and :class:`SegmentRecord`, so they do
not depend on how the records are stored. Times are clipped to an optional window; open segments
run until ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import NamedTuple

from orchestrator.errors import UserError
from orchestrator.state.records import JobRecord, SegmentRecord, segment_cost_usd


@dataclass(frozen=True)
class Window:
    """A half-open time range ``[start, end)``."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise UserError(
                f"the report window ends ({self.end.isoformat()}) "
                f"before it starts ({self.start.isoformat()})",
                "give the window as START,END with START before END",
            )


@dataclass(frozen=True)
class LostWork:
    """Work recomputed after preemptions: steps redone and how long one step took.

    Give ``gpu_hours`` directly, or ``steps`` with ``seconds_per_step`` (wall time of one step on the
    whole job); the GPU-hours are then steps × seconds_per_step / 3600 × the job's mean GPU count.
    """

    steps: int = 0
    seconds_per_step: float | None = None
    gpu_hours: float | None = None


def clipped_hours(seg: SegmentRecord, now: datetime, window: Window | None = None) -> float:
    """Wall hours of ``seg`` inside ``window`` (all of it when no window); open segments end at ``now``."""
    start, end = seg.started_at, seg.ended_at or now
    if window is not None:
        start, end = max(start, window.start), min(end, window.end)
    return max(0.0, (end - start).total_seconds() / 3600.0)


class SegmentCost(NamedTuple):
    """One segment's share of the ledger inside a window (a tuple: a report makes one per segment)."""

    segment: SegmentRecord
    hours: float
    gpu_hours: float
    cost_usd: float
    on_demand_usd: float


def segment_cost(seg: SegmentRecord, now: datetime, window: Window | None = None) -> SegmentCost:
    """``seg``'s hours, GPU-hours, cost and on-demand cost inside ``window`` (:func:`clipped_hours`)."""
    start, end = seg.started_at, seg.ended_at or now  # clipped_hours, inline: once per segment of a report
    if window is not None:
        start = window.start if window.start > start else start
        end = window.end if window.end < end else end
    hours = (end - start).total_seconds() / 3600.0
    hours = hours if hours > 0.0 else 0.0
    return SegmentCost(
        segment=seg,
        hours=hours,
        gpu_hours=hours * seg.gpus,
        cost_usd=segment_cost_usd(hours, seg.nodes, seg.node_price_usd_per_hour),
        on_demand_usd=segment_cost_usd(hours, seg.nodes, seg.on_demand_node_price_usd_per_hour),
    )


_HOURS, _GPU_HOURS, _COST, _ON_DEMAND = (itemgetter(i) for i in range(1, 5))  # SegmentCost's fields


def _priced_by_job(
    segments: Iterable[SegmentRecord], now: datetime, window: Window | None
) -> dict[str, list[SegmentCost]]:
    """:func:`segment_cost` of each segment with time inside ``window``, by job in the order given
    (the same arithmetic, inline: a report prices every segment of the ledger)."""
    by_job: dict[str, list[SegmentCost]] = {}
    new_part = tuple.__new__
    low = None if window is None else window.start
    high = None if window is None else window.end
    for seg in segments:
        start, end = seg.started_at, seg.ended_at or now
        if low is not None and high is not None:
            start = low if low > start else start
            end = high if high < end else end
        hours = (end - start).total_seconds() / 3600.0
        if not hours > 0.0:
            continue
        nodes = seg.nodes
        part = new_part(
            SegmentCost,
            (
                seg,
                hours,
                hours * (nodes * seg.gpus_per_node),
                hours * nodes * seg.node_price_usd_per_hour,
                hours * nodes * seg.on_demand_node_price_usd_per_hour,
            ),
        )  # fmt: skip: segment_cost_usd's formula, inline
        found = by_job.get(seg.job_id)
        if found is None:
            by_job[seg.job_id] = [part]
        else:
            found.append(part)
    return by_job


@dataclass(frozen=True)
class JobCost:
    """The ledger of one job. ``idle_*``, ``measured_gpu_hours`` and ``gpu_efficiency`` are ``None``
    when no GPU-hour of the job was measured (no monitor data: no NVML on its nodes, or no monitor)."""

    job_id: str
    name: str
    user: str
    team: str
    gpu_types: tuple[str, ...]
    markets: tuple[str, ...]
    segments: int
    preemptions: int
    gpu_hours: float
    cost_usd: float
    on_demand_usd: float
    idle_gpu_hours: float | None
    """Idle GPU-hours among the measured ones (inside the window)."""
    lost_steps: int
    lost_gpu_hours: float
    lost_cost_usd: float
    parts: tuple[SegmentCost, ...] = field(default=(), repr=False, compare=False)
    """The job's segments clipped to the window, in the order given."""
    measured_gpu_hours: float | None = None
    """The GPU-hours (inside the window) that monitor windows cover; ``None``: none were measured."""
    backend: str = ""
    """The job's backend; a ``local`` job's costs are simulated (its nodes stand for cloud instances)."""
    namespace: str = ""
    """The Kubernetes namespace of the job ("" for local and SLURM jobs)."""
    cluster: str = ""
    """The Kubernetes cluster the job ran on ("" for local and SLURM jobs)."""

    @property
    def simulated(self) -> bool:
        return self.backend == "local"

    @property
    def measured_share(self) -> float:
        """The share of the job's GPU-hours that was measured (0 when none was)."""
        if not self.measured_gpu_hours or self.gpu_hours <= 0:
            return 0.0
        return min(1.0, self.measured_gpu_hours / self.gpu_hours)

    @property
    def savings_usd(self) -> float:
        return self.on_demand_usd - self.cost_usd

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.cost_usd / self.gpu_hours if self.gpu_hours > 0 else 0.0

    @property
    def idle_cost_usd(self) -> float | None:
        return None if self.idle_gpu_hours is None else self.idle_gpu_hours * self.usd_per_gpu_hour

    @property
    def gpu_efficiency(self) -> float | None:
        """Busy share of the measured GPU-hours (OpenCost's ``gpuEfficiency``); ``None`` when none was
        measured (never 100 %)."""
        if self.idle_gpu_hours is None or not self.measured_gpu_hours:
            return None
        return max(0.0, 1.0 - self.idle_gpu_hours / self.measured_gpu_hours)


def _lost_gpu_hours(lost: LostWork, gpu_hours: float, wall_hours: float) -> float:
    if lost.gpu_hours is not None:
        return lost.gpu_hours
    if lost.steps and lost.seconds_per_step is None:
        raise UserError(
            f"lost work of {lost.steps} steps has no seconds_per_step",
            "give seconds_per_step or the lost GPU-hours directly",
        )
    mean_gpus = gpu_hours / wall_hours if wall_hours > 0 else 0.0
    return lost.steps * (lost.seconds_per_step or 0.0) / 3600.0 * mean_gpus


def unknown_job(job_id: str) -> JobRecord:
    """A stand-in record for segments whose job record is missing (so their cost is never dropped)."""
    from orchestrator.state.status import JobStatus

    epoch = datetime.fromtimestamp(0).astimezone()
    return JobRecord(
        id=job_id,
        name=job_id,
        user="unknown",
        team="unknown",
        backend="unknown",
        status=JobStatus.PENDING,
        failure_reason=None,
        message="job record missing",
        spec_json="{}",
        submitted_at=epoch,
        deadline=None,
        updated_at=epoch,
        attempts=0,
        preemptions=0,
        restarts=0,
    )


def measured_in_window(
    gpu_hours: float, idle: float | None, measured: float | None
) -> tuple[float | None, float | None]:
    """(idle, measured) GPU-hours of a job inside the window: ``measured`` (over the job's life) is
    capped at its GPU-hours in the window and idle scaled with it (the same idle share); (None, None)
    when nothing was measured. ``measured`` None with ``idle`` known: an export written before
    measured GPU-hours were kept, read as if all GPU-hours were measured."""
    if idle is None:
        return None, None
    total = gpu_hours if measured is None else measured
    if total <= 0 or gpu_hours <= 0:
        return None, None
    inside = min(total, gpu_hours)
    return min(idle, total) * inside / total, inside


def job_costs(
    jobs: Iterable[JobRecord],
    segments: Iterable[SegmentRecord],
    now: datetime,
    window: Window | None = None,
    idle: Mapping[str, float] | None = None,
    lost: Mapping[str, LostWork] | None = None,
    measured: Mapping[str, float] | None = None,
) -> list[JobCost]:
    """The ledger of every job with GPU time inside ``window``, in the order jobs were given.

    ``idle`` maps job id to idle GPU-hours and ``measured`` to the GPU-hours the monitor windows
    cover (both from monitor window summaries; a job in neither was not measured); ``lost`` maps job
    id to the work it recomputed after preemptions.
    """
    by_job = _priced_by_job(segments, now, window)
    records = {j.id: j for j in jobs}
    order = [jid for jid in records if jid in by_job] + sorted(set(by_job) - set(records))
    out: list[JobCost] = []
    for jid in order:
        job = records.get(jid) or unknown_job(jid)
        parts = by_job[jid]
        gpu_hours = sum(map(_GPU_HOURS, parts))  # each sum in the parts' order, as a loop adds them
        cost = sum(map(_COST, parts))
        wall_hours = sum(map(_HOURS, parts))
        work = (lost or {}).get(jid, LostWork())
        lost_gh = _lost_gpu_hours(work, gpu_hours, wall_hours)
        idle_gh, measured_gh = measured_in_window(
            gpu_hours,
            None if idle is None or jid not in idle else float(idle[jid]),
            None if measured is None else float(measured.get(jid, 0.0)),
        )
        out.append(
            JobCost(
                job_id=jid,
                name=job.name,
                user=job.user,
                team=job.team,
                gpu_types=tuple(sorted({p[0].gpu_type for p in parts})),
                markets=tuple(sorted({p[0].market for p in parts})),
                segments=len(parts),
                preemptions=job.preemptions,
                gpu_hours=gpu_hours,
                cost_usd=cost,
                on_demand_usd=sum(map(_ON_DEMAND, parts)),
                idle_gpu_hours=idle_gh,
                lost_steps=work.steps,
                lost_gpu_hours=lost_gh,
                lost_cost_usd=lost_gh * (cost / gpu_hours if gpu_hours > 0 else 0.0),
                parts=tuple(parts),
                measured_gpu_hours=measured_gh,
                backend=job.backend,
                namespace=job.namespace,
                cluster=job.cluster,
            )
        )
    return out


def total_cost(segments: Sequence[SegmentRecord], now: datetime, window: Window | None = None) -> float:
    return sum(segment_cost(s, now, window).cost_usd for s in segments)
