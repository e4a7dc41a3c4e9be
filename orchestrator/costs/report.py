"""The cost report: ledger rows grouped by job, user, team, namespace, cluster, GPU type or market,
with time series.

:func:`build_report` is pure: records in, :class:`Report` out. Grouping is per segment, so a job
that ran on spot and then on-demand counts in both market rows; a job's idle and lost GPU-hours are
shared among its segments in proportion to their GPU-hours, so every grouping adds up to the same
totals as the ledger.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from operator import attrgetter

from orchestrator.costs.avoidable import JobFixes, PricedFix, Tuned, price, saved_by_tuning
from orchestrator.costs.budgets import CostConfig, month_window
from orchestrator.costs.bulk import without_collector
from orchestrator.costs.inputs import ReportInputs
from orchestrator.costs.ledger import JobCost, LostWork, Window, job_costs
from orchestrator.costs.report_rows import SUMMED as SUMMED
from orchestrator.costs.report_rows import Buckets, JobExtras, Rows
from orchestrator.costs.report_rows import ReportRow as ReportRow
from orchestrator.costs.report_rows import Series as Series
from orchestrator.errors import UserError
from orchestrator.spec.durations import parse_duration
from orchestrator.state.records import JobRecord, SegmentRecord, segment_cost_usd
from orchestrator.times import parse_iso


class GroupBy(StrEnum):
    JOB = "job"
    USER = "user"
    TEAM = "team"
    GPU = "gpu"
    MARKET = "market"
    NAMESPACE = "namespace"
    CLUSTER = "cluster"


JOB_GROUPS = frozenset({GroupBy.JOB, GroupBy.USER, GroupBy.TEAM, GroupBy.NAMESPACE, GroupBy.CLUSTER})
"""The groupings whose key is the job's (every segment of a job is in one row)."""

NO_PLACE = "-"
"""The namespace and cluster row of jobs that have none (local and SLURM jobs)."""


@dataclass(frozen=True)
class BudgetBurn:
    """One monthly budget's spend in the calendar month of the report: cumulative USD at the end of
    each day so far (``times[i]``: the end of day i, or the report's time for today)."""

    label: str
    monthly_usd: float
    month: Window
    times: list[datetime]
    cumulative_usd: list[float]


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
    markets: dict[str, float] = field(default_factory=dict)
    """Spend by market (``spot``, ``on-demand``), largest first."""
    budgets: list[BudgetBurn] = field(default_factory=list)
    """The configured monthly budgets' burn (empty when no budgets are configured)."""
    top_fixes: list[PricedFix] = field(default_factory=list)
    """The fixes that save the most, priced over the window's spend and the remaining work, largest first."""
    source_notes: list[str] = field(default_factory=list)
    """What the report's source leaves out (GPUJobs deleted before a report read from the cluster):
    the first of :attr:`notes`, and written into every format, CSV too."""

    @property
    def simulated(self) -> bool:
        """Whether some costs are simulated (jobs of the local backend)."""
        return any(j.simulated for j in self.jobs)


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
        return parse_iso(s)
    except ValueError as exc:
        raise UserError(
            f"--window: {s!r} is not a date or time", "use ISO 8601, e.g. 2026-03-01,2026-03-08T12:00"
        ) from exc


def parse_window(text: str) -> Window:
    """``START,END`` in ISO 8601 (dates or times; naive times are UTC)."""
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise UserError(f"--window {text!r} is not START,END", "write it like 2026-03-01,2026-03-08")
    return Window(_parse_time(parts[0]), _parse_time(parts[1]))


def data_span(segments: Iterable[SegmentRecord], window: Window, now: datetime) -> Window:
    """Where the segments ran inside ``window`` (open ones until ``now``); ``window`` when none did."""
    first: datetime | None = None
    last: datetime | None = None
    for seg in segments:  # max(start, window.start), min(end, window.end); the first of equals, as min/max
        start, end = seg.started_at, seg.ended_at or now
        start = window.start if window.start > start else start
        end = window.end if window.end < end else end
        if end > start:
            first = start if first is None or start < first else first
            last = end if last is None or end > last else last
    if first is None or last is None:
        return window
    return Window(first, last)


def _group_key(by: GroupBy) -> Callable[[JobCost, SegmentRecord], str]:
    keys: dict[GroupBy, Callable[[JobCost, SegmentRecord], str]] = {
        GroupBy.JOB: lambda j, s: j.job_id,
        GroupBy.USER: lambda j, s: j.user,
        GroupBy.TEAM: lambda j, s: j.team,
        GroupBy.GPU: lambda j, s: s.gpu_type,
        GroupBy.MARKET: lambda j, s: s.market,
        GroupBy.NAMESPACE: lambda j, s: j.namespace or NO_PLACE,
        GroupBy.CLUSTER: lambda j, s: j.cluster or NO_PLACE,
    }
    return keys[by]


def _job_extras(
    job: JobCost, fixes: JobFixes | None, tuned: Sequence[Tuned], now: datetime, window: Window
) -> JobExtras:
    share = None if fixes is None else fixes.avoidable_share
    saved = saved_by_tuning(tuned, [p.segment for p in job.parts], now, window) if tuned else None
    counted = [f for f in (fixes.fixes if fixes is not None else ()) if f.share and f.counted]
    top = max(counted, key=lambda f: ((f.share or 0.0) * f.coverage, f.code), default=None)
    return JobExtras(share, saved or 0.0, None if top is None else f"{top.code}: {top.fix}")


TOP_FIXES = 10


def top_fixes(
    costs: Iterable[JobCost],
    fixes: Mapping[str, JobFixes],
    to_finish: Mapping[str, float],
    limit: int = TOP_FIXES,
) -> list[PricedFix]:
    """The fixes that save the most, over each job's spend in the window and its remaining work."""
    found = []
    for jc in costs:
        known = fixes.get(jc.job_id)
        if known is None or not known.known:
            continue
        priced = price(jc.job_id, jc.team, known, jc.cost_usd, to_finish.get(jc.job_id))
        found += [p for p in priced.priced if p.fix.share and p.ranking_usd > 0]
    return sorted(found, key=lambda p: (-p.ranking_usd, p.job_id, p.fix.code))[:limit]


_STARTED = attrgetter("started_at")


def default_window(segments: Iterable[SegmentRecord], now: datetime) -> Window:
    """All time: from the first segment's start (or a day ago) until ``now``."""
    first = min(map(_STARTED, segments), default=now - timedelta(days=1))
    return Window(min(first, now - timedelta(hours=1)), now)


def measured_note(totals: ReportRow) -> str | None:
    """What the report says when some GPU-hours were not measured (None when all were)."""
    if totals.gpu_hours <= 0 or totals.measured_gpu_hours >= totals.gpu_hours * (1 - 1e-9):
        return None
    if totals.measured_gpu_hours <= 0:
        return (
            f"GPU use not measured: none of the {totals.gpu_hours:,.2f} GPU-hours has monitor data (no NVML "
            "on the nodes, or the monitor was off); idle GPU-hours and efficiency are not known"
        )
    return (
        f"GPU use measured on {totals.measured_gpu_hours:,.2f} of {totals.gpu_hours:,.2f} GPU-hours "
        f"({100 * totals.measured_share:.0f}%); efficiency counts only measured GPU-hours, "
        "'not measured' where none was"
    )


SIMULATED_NOTE = (
    "costs of local-backend jobs are simulated: local nodes are priced as the cloud instance they stand for"
)


def _notes(costs: list[JobCost], totals: ReportRow) -> list[str]:
    notes = []
    found = measured_note(totals)
    if found:
        notes.append(found)
    if any(c.simulated for c in costs):
        notes.append(SIMULATED_NOTE)
    return notes


def _markets(costs: Iterable[JobCost]) -> dict[str, float]:
    spend: dict[str, float] = defaultdict(float)
    for jc in costs:
        for part in jc.parts:
            spend[part.segment.market] += part.cost_usd
    return dict(sorted(spend.items(), key=lambda kv: (-kv[1], kv[0])))


def budget_burn(
    label: str,
    monthly_usd: float,
    counts: Callable[[str], bool],
    jobs: Iterable[JobRecord],
    segments: Iterable[SegmentRecord],
    now: datetime,
) -> BudgetBurn:
    """The spend of the teams that ``counts`` in the calendar month of ``now``, cumulative per day.
    Each segment is priced inside each day it overlaps (:func:`segment_cost`'s arithmetic) and added
    to that day's spend, in the order given."""
    month = month_window(now)
    ids = {j.id for j in jobs if counts(j.team)}
    days: list[Window] = []
    day = month.start
    while day < now and day < month.end:
        days.append(Window(day, min(day + timedelta(days=1), now)))
        day += timedelta(days=1)
    starts = [d.start for d in days]
    spent = [0.0] * len(days)
    for seg in segments:
        if seg.job_id not in ids:
            continue
        started, ended = seg.started_at, seg.ended_at or now
        for i in range(max(0, bisect_right(starts, started) - 1), len(days)):  # from the day it starts in
            low, high = days[i].start, days[i].end
            if low >= ended:
                break
            hours = (
                (high if high < ended else ended) - (low if low > started else started)
            ).total_seconds() / 3600.0
            if hours > 0.0:  # a segment outside the day costs nothing in it
                spent[i] += segment_cost_usd(hours, seg.nodes, seg.node_price_usd_per_hour)
    times, cumulative, total = [], [], 0.0
    for window, day_usd in zip(days, spent, strict=True):
        total += day_usd
        times.append(window.end)
        cumulative.append(total)
    return BudgetBurn(label, monthly_usd, month, times, cumulative)


def budget_burns(
    config: CostConfig | None, jobs: Iterable[JobRecord], segments: Iterable[SegmentRecord], now: datetime
) -> list[BudgetBurn]:
    """One :class:`BudgetBurn` per configured team budget, and one for the budget the other teams
    share (when it is set and some other team spent); empty without budgets. The segments are sorted
    to the budgets their jobs charge in one pass (each budget's in the order given)."""
    if config is None or not config.has_budgets:
        return []
    listed = set(config.team_budgets_usd)
    budgets: list[tuple[str, float, Callable[[str], bool]]] = [
        (f"team {team}", usd, team.__eq__) for team, usd in sorted(config.team_budgets_usd.items())
    ]
    if config.other_teams_monthly_usd is not None:
        budgets.append(("other teams (shared)", config.other_teams_monthly_usd, lambda t: t not in listed))
    job_list = list(jobs)
    charges = {j.id: [i for i, (_, _, counts) in enumerate(budgets) if counts(j.team)] for j in job_list}
    month_start = month_window(now).start
    of_budget: list[list[SegmentRecord]] = [[] for _ in budgets]
    for seg in segments:
        if (seg.ended_at or now) > month_start:  # one that ended before the month spent nothing in it
            for i in charges.get(seg.job_id, ()):
                of_budget[i].append(seg)
    burns = [
        budget_burn(label, usd, counts, job_list, mine, now)
        for (label, usd, counts), mine in zip(budgets, of_budget, strict=True)
    ]
    shared = burns[len(listed) :]  # the other teams' budget: shown once some other team spent
    return burns[: len(listed)] + [b for b in shared if b.cumulative_usd and b.cumulative_usd[-1] > 0]


@without_collector  # a report of a large ledger allocates an object or more per segment
def build_report(
    jobs: Iterable[JobRecord],
    segments: Iterable[SegmentRecord],
    now: datetime,
    window: Window | None,
    by: GroupBy | str,
    idle: Mapping[str, float] | None = None,
    lost: Mapping[str, LostWork] | None = None,
    to_finish: Mapping[str, float] | None = None,
    measured: Mapping[str, float] | None = None,
    budgets: CostConfig | None = None,
    fixes: Mapping[str, JobFixes] | None = None,
    tuned: Mapping[str, Sequence[Tuned]] | None = None,
    source_notes: Sequence[str] = (),
) -> Report:
    """Group the ledger of ``window`` (all time when ``None``) by ``by``; rows sorted by cost.
    ``to_finish``: running job id -> forecast USD to finish, added to the row of its open segment.
    ``idle``/``measured``: job id -> idle and measured GPU-hours (:func:`job_costs`); ``budgets``:
    the controller config, for each monthly budget's burn; ``fixes``: job id -> its diagnosis fixes
    (the avoidable column; ``None``: not computed); ``tuned``: job id -> its ``tune`` records;
    ``source_notes``: what the source of the records leaves out (shown first, in every format)."""
    group = GroupBy(by)
    job_list, seg_list = list(jobs), list(segments)
    win = window or default_window(seg_list, now)
    costs = job_costs(job_list, seg_list, now, win, idle, lost, measured)
    key_of = _group_key(group)
    buckets = Buckets(win, data_span(seg_list, win, now))
    grouped = Rows(key_of, buckets, group in JOB_GROUPS)
    for jc in costs:
        extras = _job_extras(jc, (fixes or {}).get(jc.job_id), (tuned or {}).get(jc.job_id, ()), now, win)
        grouped.add_job(jc, extras, to_finish, now)
    members = grouped.members
    ordered = sorted(grouped.rows.values(), key=lambda r: (-r.cost_usd, r.name))
    totals = ReportRow("TOTAL", jobs=len(costs))
    for row in ordered:
        row.jobs = len(members[row.name])
        for name in SUMMED:
            setattr(totals, name, getattr(totals, name) + getattr(row, name))
        for fix, usd in row.fix_usd.items():
            totals.fix_usd[fix] = totals.fix_usd.get(fix, 0.0) + usd
    series = buckets.series([r.name for r in ordered])
    burns = budget_burns(budgets, job_list, seg_list, now)
    found = top_fixes(costs, fixes or {}, to_finish or {})
    notes = [*source_notes, *_notes(costs, totals)]
    return Report(win, group, now, ordered, totals, costs, series, notes, _markets(costs), burns, found,
                  list(source_notes))  # fmt: skip


def build_report_from(
    inputs: ReportInputs,
    now: datetime,
    window: Window | None,
    by: GroupBy | str,
    budgets: CostConfig | None = None,
) -> Report:
    """:func:`build_report` over everything a :class:`~orchestrator.costs.inputs.ReportInputs` holds."""
    return build_report(
        inputs.jobs, inputs.segments, now, window, by, inputs.idle, inputs.lost, inputs.to_finish,
        inputs.measured, budgets, inputs.fixes, inputs.tuned, inputs.notes,
    )  # fmt: skip
