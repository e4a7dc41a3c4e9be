"""The cost report: ledger rows grouped by job, user, team, GPU type or market, with time series.

:func:`build_report` is pure: records in, :class:`Report` out. Grouping is per segment, so a job
that ran on spot and then on-demand counts in both market rows; a job's idle and lost GPU-hours are
shared among its segments in proportion to their GPU-hours, so every grouping adds up to the same
totals as the ledger.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from orchestrator.costs.ledger import JobCost, LostWork, SegmentCost, Window, job_costs
from orchestrator.errors import UserError
from orchestrator.spec.durations import parse_duration
from orchestrator.state.records import JobRecord, SegmentRecord

MAX_SERIES = 8
"""Groups drawn separately in the cost-over-time chart; the rest are summed as ``other``."""


class GroupBy(StrEnum):
    JOB = "job"
    USER = "user"
    TEAM = "team"
    GPU = "gpu"
    MARKET = "market"


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

    @property
    def projected_usd(self) -> float:
        """Spent plus the running jobs' forecast cost to finish."""
        return self.cost_usd + self.to_finish_usd

    @property
    def savings_usd(self) -> float:
        return self.on_demand_usd - self.cost_usd

    @property
    def gpu_efficiency(self) -> float | None:
        if self.measured_gpu_hours <= 0:
            return None
        return max(0.0, 1.0 - self.idle_gpu_hours / self.measured_gpu_hours)


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
)
"""The :class:`ReportRow` fields that add up across rows."""


@dataclass(frozen=True)
class Series:
    """Cost and savings per time bucket; ``cost_by_group`` holds one list per drawn group."""

    bucket: timedelta
    starts: list[datetime]
    cost_by_group: dict[str, list[float]]
    savings: list[float]


@dataclass(frozen=True)
class Report:
    window: Window
    by: GroupBy
    generated_at: datetime
    rows: list[ReportRow]
    totals: ReportRow
    jobs: list[JobCost]
    series: Series
    notes: list[str] = field(default_factory=list)


def parse_since(text: str, now: datetime) -> Window:
    """``7d``, ``12h``, ``30m``: the window from that long ago until ``now``."""
    try:
        span = parse_duration(text)
    except ValueError as exc:
        raise UserError(f"--since {text!r}: {exc}", "write it like 7d, 24h or 90m") from exc
    if span.total_seconds() <= 0:
        raise UserError(f"--since {text!r} is an empty window", "give a positive duration such as 7d")
    return Window(now - span, now)


def _parse_time(text: str) -> datetime:
    s = text.strip()
    try:
        moment = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError as exc:
        raise UserError(
            f"--window: {s!r} is not a date or time", "use ISO 8601, e.g. 2026-03-01,2026-03-08T12:00"
        ) from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_window(text: str) -> Window:
    """``START,END`` in ISO 8601 (dates or times; naive times are UTC)."""
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise UserError(f"--window {text!r} is not START,END", "write it like 2026-03-01,2026-03-08")
    return Window(_parse_time(parts[0]), _parse_time(parts[1]))


def _bucket_for(span: timedelta) -> timedelta:
    if span <= timedelta(days=2):
        return timedelta(hours=1)
    if span <= timedelta(days=92):
        return timedelta(days=1)
    return timedelta(days=7)


def _group_key(by: GroupBy) -> Callable[[JobCost, SegmentRecord], str]:
    keys: dict[GroupBy, Callable[[JobCost, SegmentRecord], str]] = {
        GroupBy.JOB: lambda j, s: j.job_id,
        GroupBy.USER: lambda j, s: j.user,
        GroupBy.TEAM: lambda j, s: j.team,
        GroupBy.GPU: lambda j, s: s.gpu_type,
        GroupBy.MARKET: lambda j, s: s.market,
    }
    return keys[by]


def _add_share(row: ReportRow, job: JobCost, part: SegmentCost) -> None:
    share = part.gpu_hours / job.gpu_hours if job.gpu_hours > 0 else 0.0
    row.gpu_hours += part.gpu_hours
    row.cost_usd += part.cost_usd
    row.on_demand_usd += part.on_demand_usd
    row.lost_gpu_hours += job.lost_gpu_hours * share
    row.lost_cost_usd += job.lost_cost_usd * share
    if job.idle_gpu_hours is not None:
        row.measured_gpu_hours += part.gpu_hours
        row.idle_gpu_hours += job.idle_gpu_hours * share
        row.idle_cost_usd += (job.idle_cost_usd or 0.0) * share


class _Buckets:
    """Spreads each segment's cost and savings over fixed time buckets."""

    def __init__(self, window: Window) -> None:
        self.window = window
        self.size = _bucket_for(window.end - window.start)
        span = (window.end - window.start).total_seconds()
        self.count = max(1, math.ceil(span / self.size.total_seconds()))
        self.cost: dict[str, list[float]] = defaultdict(lambda: [0.0] * self.count)
        self.savings = [0.0] * self.count

    def add(self, key: str, seg: SegmentRecord, now: datetime) -> None:
        start = max(seg.started_at, self.window.start)
        end = min(seg.ended_at or now, self.window.end)
        step = self.size.total_seconds()
        rate = seg.nodes * seg.node_price_usd_per_hour / 3600.0
        save_rate = seg.nodes * (seg.on_demand_node_price_usd_per_hour - seg.node_price_usd_per_hour) / 3600.0
        offset = (start - self.window.start).total_seconds()
        stop = (end - self.window.start).total_seconds()
        idx = int(offset // step)
        costs = self.cost[key]
        while offset < stop and idx < self.count:
            upto = min(stop, (idx + 1) * step)
            secs = upto - offset
            costs[idx] += secs * rate
            self.savings[idx] += secs * save_rate
            offset, idx = upto, idx + 1

    def series(self, ranked: list[str]) -> Series:
        drawn: dict[str, list[float]] = {k: self.cost[k] for k in ranked[:MAX_SERIES] if k in self.cost}
        rest = [k for k in self.cost if k not in drawn]
        if rest:
            drawn["other"] = [sum(self.cost[k][i] for k in rest) for i in range(self.count)]
        starts = [self.window.start + i * self.size for i in range(self.count)]
        return Series(self.size, starts, drawn, self.savings)


def default_window(segments: Iterable[SegmentRecord], now: datetime) -> Window:
    """All time: from the first segment's start (or a day ago) until ``now``."""
    first = min((s.started_at for s in segments), default=now - timedelta(days=1))
    return Window(min(first, now - timedelta(hours=1)), now)


def build_report(
    jobs: Iterable[JobRecord],
    segments: Iterable[SegmentRecord],
    now: datetime,
    window: Window | None,
    by: GroupBy | str,
    idle: Mapping[str, float] | None = None,
    lost: Mapping[str, LostWork] | None = None,
    to_finish: Mapping[str, float] | None = None,
) -> Report:
    """Group the ledger of ``window`` (all time when ``None``) by ``by``; rows sorted by cost.
    ``to_finish``: running job id -> forecast USD to finish, added to the row of its open segment."""
    group = GroupBy(by)
    seg_list = list(segments)
    win = window or default_window(seg_list, now)
    costs = job_costs(jobs, seg_list, now, win, idle, lost)
    key_of = _group_key(group)
    rows: dict[str, ReportRow] = {}
    members: dict[str, set[str]] = defaultdict(set)
    buckets = _Buckets(win)
    for jc in costs:
        for part in jc.parts:
            key = key_of(jc, part.segment)
            row = rows.setdefault(key, ReportRow(key))
            _add_share(row, jc, part)
            if part.segment.ended_at is None and to_finish:
                row.to_finish_usd += to_finish.get(jc.job_id, 0.0)
            members[key].add(jc.job_id)
            buckets.add(key, part.segment, now)
    ordered = sorted(rows.values(), key=lambda r: (-r.cost_usd, r.name))
    totals = ReportRow("TOTAL", jobs=len(costs))
    for row in ordered:
        row.jobs = len(members[row.name])
        for name in SUMMED:
            setattr(totals, name, getattr(totals, name) + getattr(row, name))
    notes = []
    if costs and not any(c.idle_gpu_hours is not None for c in costs):
        notes.append("no monitor data: idle GPU-hours and efficiency are not known")
    series = buckets.series([r.name for r in ordered])
    return Report(win, group, now, ordered, totals, costs, series, notes)
