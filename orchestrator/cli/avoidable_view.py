"""Avoidable spend of a stored job, for `gpuctl diagnose JOB`, `gpuctl status JOB` and `gpuctl cost report`:
its findings (:mod:`orchestrator.monitor.diagnosis`), the right-size recommendation (the right-size
policy over what runs of the job measured), priced by :mod:`orchestrator.costs.avoidable`, and shown
as text. Every text shown goes through :func:`terminal_text` (the caller prints it)."""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from pathlib import Path
from typing import Any

from orchestrator.costs.avoidable import (
    NOT_MEASURED,
    FixShare,
    JobAvoidable,
    JobFixes,
    JobProgress,
    Tuned,
    month_spend,
    price,
    read_job_fixes,
    read_job_progress,
    saved_by_tuning,
)
from orchestrator.costs.ledger import LostWork
from orchestrator.errors import GpuctlError
from orchestrator.monitor.diagnosis import Finding, GpuCandidate
from orchestrator.state.forecast import forecast
from orchestrator.state.job_dir import JOBS_DIR, JobDir
from orchestrator.state.ledger_read import read_segments
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.row_check import DamagedRow
from orchestrator.state.state_rows import load_state
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.state.usage import SUMMARY_GLOB, UsageStore


@dataclass(frozen=True)
class Diagnosed:
    findings: list[Finding]
    avoidable: JobAvoidable
    tuned: list[Tuned] = field(default_factory=list)
    """The job's ``tune`` records."""
    lost: LostWork | None = None
    """The work the job lost to preemptions (None: no progress file)."""


@dataclass(frozen=True)
class StoredDiagnosis:
    """What a report takes of its jobs' diagnoses, by job id (each progress file read once)."""

    fixes: dict[str, JobFixes] = field(default_factory=dict)
    tuned: dict[str, list[Tuned]] = field(default_factory=dict)
    lost: dict[str, LostWork] = field(default_factory=dict)


def gpu_context(gpu_type: str | None) -> tuple[float | None, list[GpuCandidate]]:
    """(memory GiB, cheaper catalog GPU types) of ``gpu_type``; (None, []) when it is not in the catalog."""
    from orchestrator.cli.monitor_cmd import catalog_candidates

    if not gpu_type:
        return None, []
    try:
        return catalog_candidates(gpu_type)
    except GpuctlError:
        return None, []


def job_windows(
    store: JobStore, job_id: str, stored: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The job's stored monitor windows (``stored``: when the caller read them), else those of its
    summary files."""
    from orchestrator.monitor.summary import read_summaries

    stored = UsageStore(store).windows(job_id) if stored is None else stored
    if stored:
        return stored
    return [w for f in sorted(store.job_dir(job_id).glob(SUMMARY_GLOB)) for w in read_summaries(f)]


def to_finish(store: JobStore, job: JobRecord, now: datetime) -> tuple[float | None, float | None]:
    """(the forecast's cost of the remaining work at the current price, that price per hour): (0, None)
    for an ended job; None for a running job without a forecast yet, or a job that waits."""
    if job.status.terminal:
        return 0.0, None
    if job.status is not JobStatus.RUNNING:
        return None, None
    try:
        found = forecast(load_state(store, job.id), now)
    except DamagedRow:
        return None, None
    return (None, None) if found is None else (found.cost_to_finish_usd, found.hourly_usd)


_GPU_TYPE = attrgetter("gpu_type")


def runs_by_key(jobs: Sequence[JobRecord]) -> dict[tuple[str, str], list[JobRecord]]:
    """The stored jobs by (name, team), in the order given."""
    runs: dict[tuple[str, str], list[JobRecord]] = {}
    for job in jobs:
        runs.setdefault((job.name, job.team), []).append(job)
    return runs


@dataclass
class Measured:
    """Kept while a report diagnoses many jobs: the stored jobs by (name, team), listed once, and what
    the runs of each (name, team) measured per GPU type (so the report stays linear in the jobs)."""

    runs: dict[tuple[str, str], list[JobRecord]] | None = None
    by_key: dict[tuple[str, str], tuple[Any, ...]] = field(default_factory=dict)
    contexts: dict[str | None, tuple[float | None, list[GpuCandidate]]] = field(default_factory=dict)

    def measured(
        self, store: JobStore, job: JobRecord, now: datetime, segments: list[SegmentRecord]
    ) -> tuple[Any, ...]:
        """What the runs of ``job``'s name and team measured per GPU type (``segments``: the job's):
        nothing to compare when the job is its only run and ran on one GPU type."""
        from orchestrator.controller.measurements import gpu_measurements, monitor_usage

        key = (job.name, job.team)
        if self.runs is None:
            self.runs = runs_by_key(store.list_jobs())
        runs = self.runs.get(key, [])
        if [r.id for r in runs] in ([], [job.id]) and len(set(map(_GPU_TYPE, segments))) <= 1:
            return ()  # one run on one GPU type: the right-size policy has no other type to move to
        if key not in self.by_key:  # the same for every job of that name and team
            self.by_key[key] = gpu_measurements(store, job, now, monitor_usage(store), runs)
        return self.by_key[key]

    def gpu_context(self, gpu_type: str | None) -> tuple[float | None, list[GpuCandidate]]:
        if gpu_type not in self.contexts:
            self.contexts[gpu_type] = gpu_context(gpu_type)
        return self.contexts[gpu_type]


def rightsize_fix(
    store: JobStore,
    job: JobRecord,
    current_gpu_type: str | None,
    now: datetime,
    cache: Measured | None = None,
    segments: list[SegmentRecord] | None = None,
) -> FixShare | None:
    """The right-size recommendation as a fix: the right-size policy over what runs of this job measured
    per GPU type, priced against staying on ``current_gpu_type``; None when it saves nothing
    (``segments``: the job's, when the caller read them)."""
    from orchestrator.backends.progress import read_progress
    from orchestrator.catalog.offers import MarketKind
    from orchestrator.policies.rightsize import right_size

    if not current_gpu_type:
        return None
    segments = store.segments(job.id) if segments is None else segments
    measured = (Measured() if cache is None else cache).measured(store, job, now, segments)
    if not measured:
        return None
    progress = read_progress(JobDir(store.job_dir(job.id)).progress)
    if progress is None or not progress.total_steps:
        return None
    market = (
        MarketKind.SPOT if any(s.market == MarketKind.SPOT for s in segments[-1:]) else MarketKind.ON_DEMAND
    )
    try:
        work = float(progress.total_steps - progress.step or progress.total_steps)  # what is left, else all
        choice = right_size(measured, max(work, 1.0), math.inf, market=market,
                            current_gpu_type=current_gpu_type)  # fmt: skip
    except GpuctlError:
        return None
    saving = choice.saving
    if saving is None or saving.usd <= 0:
        return None
    pick = choice.choice
    return FixShare(
        "right-size", f"move to {pick.offer.gpu_type} x{pick.gpus} ({pick.offer.instance_type})", round(saving.share, 4),
        f"right-size: {saving.basis}", 1.0, f"right-size: {pick.offer.gpu_type} does the same work for "
        f"{saving.share:.0%} less", "info",
    )  # fmt: skip


def diagnose_job(
    store: JobStore,
    job: JobRecord,
    now: datetime | None = None,
    gpu_type: str | None = None,
    gpu_memory_gib: float | None = None,
    windows: list[dict[str, Any]] | None = None,
    progress: Path | None = None,
    cache: Measured | None = None,
    segments: list[SegmentRecord] | None = None,
) -> Diagnosed:
    """A stored job's findings and their prices (``gpu_type``: its GPU type, default its last segment's;
    ``windows`` and ``progress``: other monitor windows and progress file than the job's own)."""
    now = now or datetime.now(UTC)
    segments = store.segments(job.id) if segments is None else segments  # all of the job's, when given
    findings, fixes, read = job_findings(store, job, now, segments, gpu_type, gpu_memory_gib,
                                         job_windows(store, job.id) if windows is None else windows,
                                         progress, cache)  # fmt: skip
    saved = saved_by_tuning(read.tuned, segments, now)
    remaining, hourly = to_finish(store, job, now)
    priced = price(job.id, job.team, fixes, month_spend(segments, now), remaining, saved, hourly)
    return Diagnosed(findings, priced, read.tuned, read.lost)


def job_findings(
    store: JobStore,
    job: JobRecord,
    now: datetime,
    segments: list[SegmentRecord],
    gpu_type: str | None,
    gpu_memory_gib: float | None,
    windows: list[dict[str, Any]],
    progress: Path | None = None,
    cache: Measured | None = None,
    has_folder: bool = True,
) -> tuple[list[Finding], JobFixes, JobProgress]:
    """A stored job's findings, their fixes (unpriced) and its progress file as the diagnosis read it
    (``segments``: all of the job's; ``windows``: its monitor windows; ``has_folder``: False when the
    caller knows the job has no folder, so no file of it is looked for; the rest as
    :func:`diagnose_job`)."""
    gpu_type = gpu_type or (segments[-1].gpu_type if segments else None)
    memory, candidates = gpu_context(gpu_type) if cache is None else cache.gpu_context(gpu_type)
    extra = rightsize_fix(store, job, gpu_type, now, cache, segments)
    gpu_hours = _gpu_hours(segments, now) if windows else 0.0  # only the windows' share of them uses it
    folder = store.job_dir(job.id)
    if progress is None and not has_folder:
        read = JobProgress([], [])  # what read_job_progress reads of a missing file
    else:
        read = read_job_progress(progress or JobDir(folder).progress)
    findings, fixes = read_job_fixes(
        folder,
        windows,
        gpu_hours,
        read,
        gpu_memory_gib or memory,
        candidates,
        (extra,) if extra is not None else (),
        gpu_type,
        None if has_folder else (),
    )
    return findings, fixes, read


def _gpu_hours(segments: Sequence[SegmentRecord], now: datetime) -> float:
    """The GPU-hours of ``segments``: segment_hours(...) * SegmentRecord.gpus, inline (a report adds up
    every segment)."""
    return sum(
        [max(0.0, ((s.ended_at or now) - s.started_at).total_seconds() / 3600.0) * (s.nodes * s.gpus_per_node)
         for s in segments]
    )  # fmt: skip


def stored_fixes(
    store: JobStore,
    now: datetime,
    job_ids: Collection[str] | None = None,
    segments: Sequence[SegmentRecord] | None = None,
    jobs: Sequence[JobRecord] | None = None,
    folders: Collection[str] | None = None,
) -> StoredDiagnosis:
    """The fixes, ``tune`` records and lost work of the stored jobs (of ``job_ids`` only, when given:
    the jobs a report covers), for the cost report's avoidable column, top fixes, tuning savings and
    lost work; a job that cannot be read is left out (not measured). ``segments``: every stored
    segment, and ``jobs``: every stored job, when the caller read them (else they are read, in one
    query each); the monitor windows of every job are read in one query. ``folders``: the names of the
    job folders under the home (else listed here, once): no file of a job without one is looked for."""
    found = StoredDiagnosis()
    folders = job_folders(store.home) if folders is None else folders
    jobs = store.list_jobs() if jobs is None else jobs
    cache = Measured(runs=runs_by_key(jobs))
    by_job: dict[str, list[SegmentRecord]] = {}
    ids = [job.id for job in jobs if job_ids is None or job.id in job_ids]  # each job's, in turn
    of_job = by_job.get
    for segment in read_segments(store, of_jobs=ids) if segments is None else segments:
        found_of = of_job(segment.job_id)  # no new list per segment, as setdefault(id, []) makes
        if found_of is None:
            by_job[segment.job_id] = [segment]
        else:
            found_of.append(segment)
    stored = UsageStore(store).every_window()
    for job in jobs:
        if job_ids is not None and job.id not in job_ids:
            continue
        has_folder = may_have_folder(job.id, folders)
        try:
            windows = (
                job_windows(store, job.id, stored.get(job.id, [])) if has_folder else stored.get(job.id, [])
            )
            _, fixes, read = job_findings(store, job, now, by_job.get(job.id, []), None, None, windows,
                                          cache=cache, has_folder=has_folder)  # fmt: skip
        except (DamagedRow, GpuctlError):
            continue
        found.fixes[job.id] = fixes
        if read.tuned:
            found.tuned[job.id] = read.tuned
        if read.lost is not None:
            found.lost[job.id] = read.lost
    return found


def job_folders(home: Path) -> set[str]:
    """The names of the job folders under ``home`` (one listing, not a look for each job)."""
    try:
        with os.scandir(home / JOBS_DIR) as found:
            return {entry.name for entry in found if entry.is_dir()}
    except OSError:  # no jobs folder
        return set()


def may_have_folder(job_id: str, folders: Collection[str]) -> bool:
    """Whether job ``job_id`` may have a folder, given the names :func:`job_folders` listed (an id that
    is not one plain name is looked for as always)."""
    return job_id in folders or job_id in ("", ".", "..") or "/" in job_id or os.sep in job_id


def _usd(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:,.2f} USD"


def fix_lines(avoidable: JobAvoidable) -> list[str]:
    """The priced fixes, largest first: ``≤ 12.30 USD over the remaining work, 4.10 USD in the last 30
    days: FIX (BASIS)``."""
    lines = []
    for priced in avoidable.priced:
        fix = priced.fix
        if fix.share is None:
            lines.append(f"{fix.code}: {NOT_MEASURED} ({fix.basis})")
            continue
        if fix.share <= 0:
            continue
        remaining = "remaining work: not known yet" if priced.remaining_usd is None else (
            f"up to {priced.remaining_usd:,.2f} USD of the remaining work")  # fmt: skip
        month = "" if priced.month_usd is None else f", {priced.month_usd:,.2f} USD in the last 30 days"
        note = (
            "" if fix.counted else " [recommendation: changes the numerics, not counted as avoidable spend]"
        )
        lines.append(f"{fix.code}: {remaining}{month}; fix: {fix.fix} ({fix.basis}){note}")
    return lines
