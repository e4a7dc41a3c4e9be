"""The cost report of random ledgers equals a straightforward computation of it, in every format: each
segment priced and clipped on its own, added to its job and then to its group's row and time buckets
one at a time (the report sums runs of a group's segments in locals, prices segments inline and
pauses the garbage collector; none of it may change a number). On both engines, the report read
from the job store is that of the records written."""

from __future__ import annotations

import dataclasses
import gc
import io
import math
import random
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from html import escape
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from orchestrator.cli.cost_cmd import load_report_inputs, of_backend, of_namespace
from orchestrator.costs.avoidable import FixShare, JobFixes, Tuned, saved_by_tuning
from orchestrator.costs.budgets import CostConfig, month_window
from orchestrator.costs.bulk import collector_paused
from orchestrator.costs.charts import floor_to
from orchestrator.costs.html import _attempt_rows, to_html
from orchestrator.costs.inputs import ReportInputs
from orchestrator.costs.ledger import (
    JobCost,
    LostWork,
    SegmentCost,
    Window,
    measured_in_window,
    segment_cost,
    unknown_job,
)
from orchestrator.costs.render import to_csv, to_json, to_table, top_fixes_table
from orchestrator.costs.report import (
    NO_PLACE,
    BudgetBurn,
    GroupBy,
    Report,
    ReportRow,
    Series,
    build_report,
    build_report_from,
    data_span,
    default_window,
)
from orchestrator.costs.report_rows import MAX_SERIES, bucket_for
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from tests.costs.ledger_rows import write_records

NOW = datetime(2026, 3, 20, 12, tzinfo=UTC)
WINDOWS = (
    None,
    Window(NOW - timedelta(days=7), NOW),
    Window(NOW - timedelta(days=20), NOW - timedelta(days=3)),
)


def random_ledger(seed: int, n_jobs: int = 30) -> tuple[list[JobRecord], list[SegmentRecord]]:
    """Jobs of three backends, namespaces and clusters, with 0 to 8 segments each: open ones, preempted,
    on spot and on-demand (a spot price above on-demand: negative savings), GPU-less nodes, text that
    HTML must escape, and a few segments of a job with no record."""
    rng = random.Random(seed)
    jobs: list[JobRecord] = []
    segments: list[SegmentRecord] = []
    for i in range(n_jobs):
        start = NOW - timedelta(days=rng.uniform(0, 40), microseconds=rng.randrange(10**6))
        jobs.append(JobRecord(
            id=f"j{i:03d}", name=f"train <{i}>", user=f"u{i % 3}", team=f"t{i % 4}",
            backend=rng.choice(["local", "slurm", "kubernetes"]), status=JobStatus.SUCCEEDED, failure_reason=None,
            message="", spec_json="{}", submitted_at=start, deadline=None, updated_at=start, attempts=1,
            preemptions=rng.randint(0, 3), restarts=0, namespace=rng.choice(["", "ns-a", "ns-b"]),
            cluster=rng.choice(["", "c1"]),
        ))  # fmt: skip
        t = start
        for k in range(rng.randint(0, 8)):
            end = t + timedelta(minutes=rng.uniform(1, 600), microseconds=rng.randrange(10**6))
            segments.append(SegmentRecord(
                id=len(segments) + 1, job_id=f"j{i:03d}" if rng.random() > 0.03 else "ghost", attempt=k + 1,
                gpu_type=rng.choice(["A100", "T4", "H100"]), instance_type=rng.choice(["p4d", ""]),
                market=rng.choice(["spot", "on-demand"]), cloud="aws", region="us-east-1",
                zone=rng.choice(["use1-az1", "", "<z&'>"]), nodes=rng.randint(1, 4),
                gpus_per_node=rng.choice([0, 1, 8]),
                started_at=t, ended_at=None if rng.random() < 0.1 else min(end, NOW + timedelta(hours=1)),
                node_price_usd_per_hour=rng.uniform(0, 30), on_demand_node_price_usd_per_hour=rng.uniform(0, 40),
                price_source="list", end_reason=rng.choice([None, "preempted", "done 'ok'"]),
            ))  # fmt: skip
            t = end + timedelta(minutes=rng.uniform(0, 90))
    return jobs, segments


@dataclasses.dataclass
class Extras:
    """What a report reads beside the records, at random."""

    idle: dict[str, float]
    measured: dict[str, float] | None
    lost: dict[str, LostWork]
    to_finish: dict[str, float]
    fixes: dict[str, JobFixes] | None
    tuned: dict[str, list[Tuned]]


def random_extras(seed: int, jobs: Sequence[JobRecord]) -> Extras:
    rng = random.Random(seed)
    idle = {j.id: rng.uniform(0, 50) for j in jobs if rng.random() < 0.5}
    fixes = {
        j.id: JobFixes(
            fixes=tuple(
                FixShare(rng.choice(["IDLE", "SLOW"]), "do less", rng.choice([None, rng.random()]), "b", rng.random())
                for _ in range(rng.randint(0, 3))
            ),
            measured=("GPU use",) if rng.random() < 0.8 else (),
        )
        for j in jobs
        if rng.random() < 0.6
    }  # fmt: skip
    return Extras(
        idle=idle,
        measured={j: rng.uniform(0, 100) for j in idle if rng.random() < 0.8} if seed % 3 else None,
        lost={j.id: LostWork(rng.randint(0, 99), rng.uniform(0.1, 5)) for j in jobs if rng.random() < 0.3},
        to_finish={j.id: rng.uniform(0, 100) for j in jobs if rng.random() < 0.3},
        fixes=fixes if seed % 2 else None,
        tuned={j.id: [Tuned(NOW - timedelta(days=rng.uniform(0, 30)), 2.0, 1.5)] for j in jobs if rng.random() < 0.2},
    )  # fmt: skip


# -- the straightforward computation ---------------------------------------------------------------


def reference_jobs(
    jobs: Sequence[JobRecord], segments: Sequence[SegmentRecord], window: Window, extras: Extras
) -> list[JobCost]:
    """Each segment priced by :func:`segment_cost`, its job's sums added one part at a time."""
    parts: dict[str, list[SegmentCost]] = defaultdict(list)
    for s in segments:
        priced = segment_cost(s, NOW, window)
        if priced.hours > 0:
            parts[s.job_id].append(priced)
    records = {j.id: j for j in jobs}
    found = []
    for job_id in [j for j in records if j in parts] + sorted(set(parts) - set(records)):
        job, mine = records.get(job_id) or unknown_job(job_id), parts[job_id]
        gpu_hours = cost = on_demand = wall = 0.0
        for p in mine:
            gpu_hours, cost, on_demand, wall = gpu_hours + p.gpu_hours, cost + p.cost_usd, on_demand + p.on_demand_usd, wall + p.hours  # fmt: skip
        work = extras.lost.get(job_id, LostWork())
        lost_gh = (
            work.steps * (work.seconds_per_step or 0.0) / 3600.0 * (gpu_hours / wall if wall > 0 else 0.0)
        )
        idle, measured = measured_in_window(
            gpu_hours,
            extras.idle.get(job_id),
            None if extras.measured is None else extras.measured.get(job_id, 0.0),
        )
        found.append(JobCost(
            job_id, job.name, job.user, job.team, tuple(sorted({p.segment.gpu_type for p in mine})),
            tuple(sorted({p.segment.market for p in mine})), len(mine), job.preemptions, gpu_hours, cost,
            on_demand, idle, work.steps, lost_gh, lost_gh * (cost / gpu_hours if gpu_hours > 0 else 0.0),
            tuple(mine), measured, job.backend, job.namespace, job.cluster,
        ))  # fmt: skip
    return found


def group_of(by: GroupBy, job: JobCost, s: SegmentRecord) -> str:
    return {
        GroupBy.JOB: job.job_id, GroupBy.USER: job.user, GroupBy.TEAM: job.team, GroupBy.GPU: s.gpu_type,
        GroupBy.MARKET: s.market, GroupBy.NAMESPACE: job.namespace or NO_PLACE,
        GroupBy.CLUSTER: job.cluster or NO_PLACE,
    }[by]  # fmt: skip


def add_part(row: ReportRow, job: JobCost, part: SegmentCost, extras: Extras, window: Window) -> None:
    """One segment's share of its job added to its row."""
    fixes = (extras.fixes or {}).get(job.job_id)
    share = None if fixes is None else fixes.avoidable_share
    counted = [f for f in (fixes.fixes if fixes else ()) if f.share and f.counted]
    top = max(counted, key=lambda f: ((f.share or 0.0) * f.coverage, f.code), default=None)
    tuned = extras.tuned.get(job.job_id)
    saved = (saved_by_tuning(tuned, [p.segment for p in job.parts], NOW, window) if tuned else None) or 0.0
    by_gpu_hours = part.gpu_hours / job.gpu_hours if job.gpu_hours > 0 else 0.0
    row.gpu_hours += part.gpu_hours
    row.cost_usd += part.cost_usd
    row.on_demand_usd += part.on_demand_usd
    row.lost_gpu_hours += job.lost_gpu_hours * by_gpu_hours
    row.lost_cost_usd += job.lost_cost_usd * by_gpu_hours
    if job.idle_gpu_hours is not None and job.measured_gpu_hours:
        row.measured_gpu_hours += (job.measured_gpu_hours or 0.0) * by_gpu_hours
        row.idle_gpu_hours += job.idle_gpu_hours * by_gpu_hours
        row.idle_cost_usd += (job.idle_cost_usd or 0.0) * by_gpu_hours
    if share is not None:
        row.avoidable_usd += share * part.cost_usd
        row.diagnosed_cost_usd += part.cost_usd
        if top is not None:
            key = f"{top.code}: {top.fix}"
            row.fix_usd[key] = row.fix_usd.get(key, 0.0) + share * part.cost_usd
    if job.cost_usd > 0:
        row.tuned_usd += saved * part.cost_usd / job.cost_usd
    if part.segment.ended_at is None and extras.to_finish:
        row.to_finish_usd += extras.to_finish.get(job.job_id, 0.0)


def reference_series(
    costs: Sequence[JobCost],
    by: GroupBy,
    segments: Sequence[SegmentRecord],
    window: Window,
    ranked: list[str],
) -> Series:
    """Each segment's cost and savings spread over the buckets, one bucket at a time."""
    span = data_span(segments, window, NOW)
    size = bucket_for(span.end - span.start)
    origin = floor_to(span.start, size)
    end = max(span.end, origin + size)
    count = max(1, math.ceil((end - origin).total_seconds() / size.total_seconds()))
    cost: dict[str, list[float]] = {}
    savings = [0.0] * count
    for job in costs:
        for part in job.parts:
            s = part.segment
            line = cost.setdefault(group_of(by, job, s), [0.0] * count)
            start = max(s.started_at, window.start, origin)
            stop = min(s.ended_at or NOW, window.end, end)
            rate = s.nodes * s.node_price_usd_per_hour / 3600.0
            save_rate = s.nodes * (s.on_demand_node_price_usd_per_hour - s.node_price_usd_per_hour) / 3600.0
            at, until = (start - origin).total_seconds(), (stop - origin).total_seconds()
            i = int(at // size.total_seconds())
            while at < until and i < count:
                upto = min(until, (i + 1) * size.total_seconds())
                line[i] += (upto - at) * rate
                savings[i] += (upto - at) * save_rate
                at, i = upto, i + 1
    drawn = {k: cost[k] for k in ranked[:MAX_SERIES] if k in cost}
    rest = [k for k in cost if k not in drawn]
    if rest:
        drawn["other"] = [sum(cost[k][i] for k in rest) for i in range(count)]
    return Series(size, [origin + i * size for i in range(count)], drawn, savings)


def reference_burns(
    config: CostConfig | None, jobs: Sequence[JobRecord], segments: Sequence[SegmentRecord], now: datetime
) -> list[BudgetBurn]:
    """Each configured budget's spend in the month of ``now``, day by day: every segment of its teams
    priced inside each day (the shared budget of the other teams only when they spent)."""
    if config is None or not config.has_budgets:
        return []
    listed = set(config.team_budgets_usd)
    budgets = [
        (f"team {team}", usd, {team}.__contains__) for team, usd in sorted(config.team_budgets_usd.items())
    ]
    if config.other_teams_monthly_usd is not None:
        budgets.append(("other teams (shared)", config.other_teams_monthly_usd, lambda t: t not in listed))
    month = month_window(now)
    burns = []
    for label, usd, counts in budgets:
        ids = {j.id for j in jobs if counts(j.team)}
        times, cumulative, total = [], [], 0.0
        day = month.start
        while day < now:
            end = min(day + timedelta(days=1), now)
            total += sum(segment_cost(s, now, Window(day, end)).cost_usd for s in segments if s.job_id in ids)
            times.append(end)
            cumulative.append(total)
            day += timedelta(days=1)
        if label.startswith("team") or total > 0:
            burns.append(BudgetBurn(label, usd, month, times, cumulative))
    return burns


def reference_report(
    report: Report,
    jobs: Sequence[JobRecord],
    segments: Sequence[SegmentRecord],
    extras: Extras,
    budgets: CostConfig | None = None,
) -> Report:
    """``report`` with its jobs, rows, totals, series, markets and budget burns computed the
    straightforward way (``budgets``: the configuration the report was built with)."""
    window, by = report.window, report.by
    costs = reference_jobs(jobs, segments, window, extras)
    rows: dict[str, ReportRow] = {}
    members: dict[str, set[str]] = defaultdict(set)
    markets: dict[str, float] = defaultdict(float)
    for job in costs:
        for part in job.parts:
            key = group_of(by, job, part.segment)
            add_part(rows.setdefault(key, ReportRow(key)), job, part, extras, window)
            members[key].add(job.job_id)
            markets[part.segment.market] += part.cost_usd
    ordered = sorted(rows.values(), key=lambda r: (-r.cost_usd, r.name))
    totals = ReportRow("TOTAL", jobs=len(costs))
    for row in ordered:
        row.jobs = len(members[row.name])
        for name in ("gpu_hours", "cost_usd", "on_demand_usd", "idle_gpu_hours", "idle_cost_usd",
                     "measured_gpu_hours", "lost_gpu_hours", "lost_cost_usd", "to_finish_usd", "avoidable_usd",
                     "diagnosed_cost_usd", "tuned_usd"):  # fmt: skip
            setattr(totals, name, getattr(totals, name) + getattr(row, name))
        for fix, usd in row.fix_usd.items():
            totals.fix_usd[fix] = totals.fix_usd.get(fix, 0.0) + usd
    series = reference_series(costs, by, segments, window, [r.name for r in ordered])
    spend = dict(sorted(markets.items(), key=lambda kv: (-kv[1], kv[0])))
    burns = reference_burns(budgets, jobs, segments, report.generated_at)
    return dataclasses.replace(
        report, rows=ordered, totals=totals, jobs=costs, series=series, markets=spend, budgets=burns
    )


def formats(report: Report) -> dict[str, str]:
    console = Console(file=io.StringIO(), width=160, record=True)
    console.print(to_table(report, None))
    fixes = top_fixes_table(report)
    if fixes is not None:
        console.print(fixes)
    return {
        "table": console.export_text(),
        "csv": to_csv(report),
        "json": to_json(report),
        "html": to_html(report),
    }


def assert_same(report: Report, reference: Report) -> None:
    assert report.rows == reference.rows and [r.fix_usd for r in report.rows] == [
        r.fix_usd for r in reference.rows
    ]
    assert report.totals == reference.totals and report.totals.fix_usd == reference.totals.fix_usd
    assert report.series == reference.series and report.markets == reference.markets
    assert report.budgets == reference.budgets
    assert report.jobs == reference.jobs and [j.parts for j in report.jobs] == [
        j.parts for j in reference.jobs
    ]
    assert formats(report) == formats(reference)


# -- the tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_report_is_the_straightforward_sum(seed: int) -> None:
    jobs, segments = random_ledger(seed)
    extras = random_extras(seed, jobs)
    budgets = CostConfig(team_budgets_usd={"t0": 900.0}, other_teams_monthly_usd=300.0) if seed % 2 else None
    for by in GroupBy:
        for window in WINDOWS:
            report = build_report(jobs, segments, NOW, window, by, extras.idle, extras.lost, extras.to_finish,
                                  extras.measured, budgets, extras.fixes, extras.tuned)  # fmt: skip
            assert report.window == (window or default_window(segments, NOW))
            assert_same(report, reference_report(report, jobs, segments, extras, budgets))


def test_a_ledger_of_jobs_without_time_in_the_window() -> None:
    jobs, segments = random_ledger(1)
    ended = [s for s in segments if s.ended_at is not None and s.ended_at < NOW - timedelta(days=30)]
    report = build_report(jobs, ended, NOW, Window(NOW - timedelta(days=7), NOW), GroupBy.MARKET)
    assert report.rows == [] and report.jobs == [] and report.totals.cost_usd == 0.0
    assert_same(report, reference_report(report, jobs, ended, random_extras(0, [])))


def test_attempt_rows_escape_each_text_cell() -> None:
    """The HTML rows of a job's segments are those of escaping every cell."""
    jobs, segments = random_ledger(2)
    for job in build_report(jobs, segments, NOW, None, GroupBy.JOB).jobs:
        assert _attempt_rows(job) == "".join(_escaped_row(part) for part in job.parts)


def _escaped_row(part: SegmentCost) -> str:
    s = part.segment
    seconds = round(part.hours * 3600)
    h, rest = divmod(seconds, 3600)
    cells = [
        str(s.attempt), s.market, s.zone or "-", s.instance_type or "-", f"{s.nodes} x {s.gpus_per_node} {s.gpu_type}",
        f"${s.node_price_usd_per_hour:,.4f}", f"${s.on_demand_node_price_usd_per_hour:,.4f}",
        s.started_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        s.ended_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if s.ended_at else "running",
        f"{h}h{rest // 60:02d}m" if h else f"{rest // 60}m{rest % 60:02d}s", f"${part.cost_usd:,.4f}",
        s.end_reason or ("running" if s.ended_at is None else "ended"),
    ]  # fmt: skip
    return (
        f"<tr data-market='{escape(s.market)}'>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"
    )


@pytest.mark.usefixtures("each_engine")
def test_report_of_the_job_store_on_each_engine(tmp_path: Path) -> None:
    """Written to the job store and read back as `gpuctl cost report` reads it (with --since, --backend
    and --namespace), the report is the straightforward one of the records written."""
    jobs, segments = random_ledger(3, n_jobs=40)
    segments = [s for s in segments if s.job_id != "ghost"]  # the store keeps no segment without its job
    write_ledger(tmp_path, jobs, segments)
    since = NOW - timedelta(days=7)
    read = load_report_inputs(tmp_path)
    assert read.segments == segments and sorted(read.jobs, key=lambda j: j.id) == jobs
    jobs = read.jobs  # in the store's order
    cases: list[tuple[ReportInputs, list[JobRecord], list[SegmentRecord], Window | None]] = [
        (read, jobs, segments, None),
        (load_report_inputs(tmp_path, since), jobs, [s for s in segments if (s.ended_at or NOW) >= since],
         Window(since, NOW)),
        (of_backend(read, "kubernetes"), *_only(jobs, segments, lambda j: j.backend == "kubernetes"), None),
        (of_namespace(read, "ns-a"), *_only(jobs, segments, lambda j: j.namespace == "ns-a"), None),
    ]  # fmt: skip
    for inputs, wrote_jobs, wrote_segments, window in cases:
        assert inputs.segments == wrote_segments
        extras = Extras(dict(inputs.idle or {}), inputs.measured, inputs.lost, inputs.to_finish, inputs.fixes,
                        inputs.tuned)  # fmt: skip
        for by in (GroupBy.JOB, GroupBy.GPU, GroupBy.NAMESPACE):
            report = build_report_from(inputs, NOW, window, by)
            assert_same(report, reference_report(report, wrote_jobs, wrote_segments, extras))


def write_ledger(home: Path, jobs: Sequence[JobRecord], segments: Sequence[SegmentRecord]) -> None:
    """The records as the job store's rows (each segment keeps its id)."""
    write_records(JobStore(home), jobs, segments, keep_ids=True)


def _only(
    jobs: list[JobRecord], segments: list[SegmentRecord], keep: Any
) -> tuple[list[JobRecord], list[SegmentRecord]]:
    kept = [j for j in jobs if keep(j)]
    ids = {j.id for j in kept}
    return kept, [s for s in segments if s.job_id in ids]


# -- the garbage collector -----------------------------------------------------------------------------


@pytest.fixture()
def collections() -> Iterator[list[str]]:
    """The collections the garbage collector starts while the test runs (the collector on)."""
    started: list[str] = []

    def seen(phase: str, info: Mapping[str, int]) -> None:
        if phase == "start":
            started.append(f"generation {info['generation']}")

    gc.enable()
    gc.callbacks.append(seen)
    yield started
    gc.callbacks.remove(seen)


def test_a_report_starts_no_collection(collections: list[str]) -> None:
    jobs, segments = random_ledger(4, n_jobs=300)  # thousands of objects: collections without the pause
    collections.clear()
    build_report(jobs, segments, NOW, None, GroupBy.GPU)
    assert len(collections) <= 1 and gc.isenabled()  # at most the one the resumed collector starts
    garbage: list[list[int]] = [[] for _ in range(10_000)]  # the collector runs again after it
    assert collections and garbage


@pytest.mark.usefixtures("each_engine")
def test_reading_the_ledger_starts_no_collection(tmp_path: Path, collections: list[str]) -> None:
    jobs, segments = random_ledger(5, n_jobs=200)  # thousands of objects: collections without the pause
    write_ledger(tmp_path, jobs, [s for s in segments if s.job_id != "ghost"])
    collections.clear()
    load_report_inputs(tmp_path)
    assert len(collections) <= 1 and gc.isenabled()  # at most the one the resumed collector starts


def test_a_paused_collector_stays_paused() -> None:
    gc.disable()
    try:
        with collector_paused():
            with collector_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
