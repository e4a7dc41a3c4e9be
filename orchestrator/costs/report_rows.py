"""The cost report's rows and its cost-over-time buckets: each job's priced segments (a
:class:`~orchestrator.costs.ledger.JobCost`'s parts) added to the row of their group.

Grouping is per segment; a job's idle and lost GPU-hours are shared among its segments in proportion
to their GPU-hours (see :mod:`orchestrator.costs.report`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import groupby

from orchestrator.costs.charts import TIME_STEPS, floor_to
from orchestrator.costs.ledger import JobCost, SegmentCost, Window
from orchestrator.state.records import SegmentRecord

MAX_SERIES = 8
"""Groups drawn separately in the cost-over-time chart; the rest are summed as ``other``."""


@dataclass
class ReportRow:
    """One group's sums. ``measured_gpu_hours`` are the GPU-hours that have monitor data."""

    name: str
    jobs: int = 0
    gpu_hours: float = 0.0
    cost_usd: float = 0.0
    on_demand_usd: float = 0.0
    idle_gpu_hours: float = 0.0
    idle_cost_usd: float = 0.0
    measured_gpu_hours: float = 0.0
    lost_gpu_hours: float = 0.0
    lost_cost_usd: float = 0.0
    to_finish_usd: float = 0.0
    """What the group's running jobs will still cost at their current market (forecast)."""
    avoidable_usd: float = 0.0
    """Spend the diagnosed jobs' fixes could have saved (each job's largest fix; see costs/avoidable.py)."""
    diagnosed_cost_usd: float = 0.0
    """The spend of jobs whose step timings or GPU use were measured (the avoidable column's basis)."""
    tuned_usd: float = 0.0
    """What the runtime's ``tune: auto`` saved (the spend at the step time before tuning minus the cost)."""
    fix_usd: dict[str, float] = field(default_factory=dict)
    """``CODE: FIX`` -> what it saves of the row's spend (each job's largest counted fix)."""

    @property
    def top_fix(self) -> str | None:
        """The fix that saves the most of the row's spend (``CODE: FIX``); None when none saves anything."""
        found = [(usd, fix) for fix, usd in self.fix_usd.items() if usd > 0]
        return max(found)[1] if found else None

    @property
    def avoidable(self) -> float | None:
        """Avoidable USD; ``None`` when no job of the row was measured ("not measured", never 0)."""
        return self.avoidable_usd if self.diagnosed_cost_usd > 0 else None

    @property
    def projected_usd(self) -> float:
        """Spent plus the running jobs' forecast cost to finish."""
        return self.cost_usd + self.to_finish_usd

    @property
    def savings_usd(self) -> float:
        return self.on_demand_usd - self.cost_usd

    @property
    def gpu_efficiency(self) -> float | None:
        """Busy share of the measured GPU-hours only; ``None`` when none was measured (never 100 %)."""
        if self.measured_gpu_hours <= 0:
            return None
        return max(0.0, 1.0 - self.idle_gpu_hours / self.measured_gpu_hours)

    @property
    def measured_share(self) -> float:
        """The share of the row's GPU-hours that the monitors measured (0 to 1)."""
        if self.gpu_hours <= 0:
            return 0.0
        return min(1.0, self.measured_gpu_hours / self.gpu_hours)


SUMMED = (
    "gpu_hours",
    "cost_usd",
    "on_demand_usd",
    "idle_gpu_hours",
    "idle_cost_usd",
    "measured_gpu_hours",
    "lost_gpu_hours",
    "lost_cost_usd",
    "to_finish_usd",
    "avoidable_usd",
    "diagnosed_cost_usd",
    "tuned_usd",
)
"""The :class:`ReportRow` fields that add up across rows."""


@dataclass(frozen=True)
class Series:
    """Cost and savings per time bucket; ``cost_by_group`` holds one list per drawn group."""

    bucket: timedelta
    starts: list[datetime]
    cost_by_group: dict[str, list[float]]
    savings: list[float]


BUCKET_SIZES = TIME_STEPS
"""Bucket sizes of the cost-over-time series: the smallest that gives at most :data:`MAX_BUCKETS`."""
MAX_BUCKETS = 30


def bucket_for(span: timedelta, max_buckets: int = MAX_BUCKETS) -> timedelta:
    """The smallest of :data:`BUCKET_SIZES` that covers ``span`` in at most ``max_buckets`` buckets."""
    for size in BUCKET_SIZES:
        if span <= size * max_buckets:
            return size
    return BUCKET_SIZES[-1]


@dataclass(frozen=True)
class JobExtras:
    """A job's avoidable share of spend (None: not measured) and its tuning saving in the window."""

    avoidable_share: float | None
    tuned_usd: float
    top: str | None = None
    """The job's largest counted fix (``CODE: FIX``), None when none saves anything."""


class Rows:
    """The report's rows by group, and the jobs of each."""

    def __init__(
        self, key_of: Callable[[JobCost, SegmentRecord], str], buckets: Buckets, per_job: bool = False
    ) -> None:
        self.key_of, self.buckets, self.per_job = key_of, buckets, per_job
        self.rows: dict[str, ReportRow] = {}
        self.members: dict[str, set[str]] = defaultdict(set)

    def add_job(
        self, job: JobCost, extras: JobExtras, to_finish: Mapping[str, float] | None, now: datetime
    ) -> None:
        """Add each segment of ``job`` to the row of its group: its own GPU-hours and cost; its share (by
        GPU-hours) of the job's lost, measured and idle GPU-hours (only measured GPU-hours count for
        efficiency); its avoidable spend, tuning saving and projected spend; its cost over time.
        Each run of segments of one group is summed in locals, in the segments' order (the same sums
        as adding each segment to its row in turn)."""
        if not job.parts:
            return
        if self.per_job:  # every segment of the job is in the job's group
            runs: Iterable[tuple[str, Iterable[SegmentCost]]] = (
                (self.key_of(job, job.parts[0].segment), job.parts),
            )
        else:
            runs = groupby(job.parts, key=lambda part: self.key_of(job, part.segment))
        for key, run in runs:
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = ReportRow(key)
            self._add_run(
                row, key, job, extras, run, to_finish.get(job.job_id, 0.0) if to_finish else None, now
            )
            self.members[key].add(job.job_id)

    def _add_run(
        self,
        row: ReportRow,
        key: str,
        job: JobCost,
        extras: JobExtras,
        run: Iterable[SegmentCost],
        to_finish: float | None,
        now: datetime,
    ) -> None:
        measured = job.idle_gpu_hours is not None and bool(job.measured_gpu_hours)
        measured_gh, idle_gh = job.measured_gpu_hours or 0.0, job.idle_gpu_hours or 0.0
        idle_usd = (job.idle_cost_usd or 0.0) if measured else 0.0
        avoidable, top, tuned = extras.avoidable_share, extras.top, extras.tuned_usd
        job_gh, job_cost, lost_gh, lost_usd = (
            job.gpu_hours,
            job.cost_usd,
            job.lost_gpu_hours,
            job.lost_cost_usd,
        )
        gh, cost, on_demand, row_lost_gh, row_lost_usd = (
            row.gpu_hours,
            row.cost_usd,
            row.on_demand_usd,
            row.lost_gpu_hours,
            row.lost_cost_usd,
        )
        row_measured, row_idle, row_idle_usd = row.measured_gpu_hours, row.idle_gpu_hours, row.idle_cost_usd
        row_avoidable, diagnosed, row_tuned, finish = (
            row.avoidable_usd,
            row.diagnosed_cost_usd,
            row.tuned_usd,
            row.to_finish_usd,
        )
        fix = row.fix_usd.get(top, 0.0) if top is not None and avoidable is not None else 0.0
        # A share that is 0.0 changes no sum (a row's sums start at 0.0 and are never -0.0), so a job
        # with no lost work, no measured GPU-hours or no tuning saving adds none of them.
        lost = lost_gh != 0.0 or lost_usd != 0.0
        shared, saved = lost or measured, tuned != 0.0 and job_cost > 0
        segments = []
        for seg, _, part_gh, part_cost, part_on_demand in run:
            segments.append(seg)
            gh += part_gh
            cost += part_cost
            on_demand += part_on_demand
            if shared:
                share = part_gh / job_gh if job_gh > 0 else 0.0
                if lost:
                    row_lost_gh += lost_gh * share
                    row_lost_usd += lost_usd * share
                if measured:
                    row_measured += measured_gh * share
                    row_idle += idle_gh * share
                    row_idle_usd += idle_usd * share
            if avoidable is not None:
                row_avoidable += avoidable * part_cost
                diagnosed += part_cost
                fix += avoidable * part_cost
            if saved:
                row_tuned += tuned * part_cost / job_cost
            if seg.ended_at is None and to_finish is not None:
                finish += to_finish
        self.buckets.add(key, segments, now)
        row.gpu_hours, row.cost_usd, row.on_demand_usd, row.lost_gpu_hours, row.lost_cost_usd = (
            gh,
            cost,
            on_demand,
            row_lost_gh,
            row_lost_usd,
        )
        row.measured_gpu_hours, row.idle_gpu_hours, row.idle_cost_usd = row_measured, row_idle, row_idle_usd
        row.avoidable_usd, row.diagnosed_cost_usd, row.tuned_usd, row.to_finish_usd = (
            row_avoidable,
            diagnosed,
            row_tuned,
            finish,
        )
        if top is not None and avoidable is not None:
            row.fix_usd[top] = fix


class Buckets:
    """Spreads each segment's cost and savings over time buckets that follow where the jobs ran
    (``span``), of a size from :data:`BUCKET_SIZES`, aligned to whole multiples of it."""

    def __init__(self, window: Window, span: Window) -> None:
        self.size = bucket_for(span.end - span.start)
        start = floor_to(span.start, self.size)
        end = max(span.end, start + self.size)
        self.window = Window(start, end)
        self.clip = window
        self.count = max(1, math.ceil((end - start).total_seconds() / self.size.total_seconds()))
        self.cost: dict[str, list[float]] = defaultdict(lambda: [0.0] * self.count)
        self.savings = [0.0] * self.count
        self._from = max(window.start, self.window.start)  # where a segment's share may start and end
        self._until = min(window.end, self.window.end)
        self._step = self.size.total_seconds()

    def add(self, key: str, segments: Iterable[SegmentRecord], now: datetime) -> None:
        """Spread the cost and savings of each of ``segments`` (clipped to the window; an open one runs
        until ``now``) over the buckets of group ``key``, in the order given."""
        low, high, origin, step, count = self._from, self._until, self.window.start, self._step, self.count
        costs, savings = self.cost[key], self.savings
        for seg in segments:
            start, end = seg.started_at, seg.ended_at or now
            start = low if low > start else start
            end = high if high < end else end
            nodes, node_price = seg.nodes, seg.node_price_usd_per_hour
            rate = nodes * node_price / 3600.0
            save_rate = nodes * (seg.on_demand_node_price_usd_per_hour - node_price) / 3600.0
            offset = (start - origin).total_seconds()
            stop = (end - origin).total_seconds()
            idx = int(offset // step)
            if offset < stop and idx < count and stop <= (idx + 1) * step:  # inside one bucket: the
                secs = stop - offset  # loop's one turn
                costs[idx] += secs * rate
                savings[idx] += secs * save_rate
                continue
            while offset < stop and idx < count:
                upto = (idx + 1) * step
                upto = upto if upto < stop else stop  # min(stop, upto)
                secs = upto - offset
                costs[idx] += secs * rate
                savings[idx] += secs * save_rate
                offset, idx = upto, idx + 1

    def series(self, ranked: list[str]) -> Series:
        drawn: dict[str, list[float]] = {k: self.cost[k] for k in ranked[:MAX_SERIES] if k in self.cost}
        rest = [k for k in self.cost if k not in drawn]
        if rest:
            drawn["other"] = [sum(self.cost[k][i] for k in rest) for i in range(self.count)]
        starts = [self.window.start + i * self.size for i in range(self.count)]
        return Series(self.size, starts, drawn, self.savings)
