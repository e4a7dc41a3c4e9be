"""Avoidable spend: what each diagnosis finding costs in USD, so fixes can be ranked on one list.

A finding (:mod:`orchestrator.monitor.diagnosis`) carries a :class:`~orchestrator.monitor.diagnosis.Bound`:
the largest share of the job's GPU spend its fix could save, and how that was computed (an input-bound
job whose steps wait 40 % on data runs at most 1/(1-0.4) times faster once loading keeps up, so the
same work costs at most 40 % less). Here the share is priced:

- over the job's **remaining work** at its current price: share x the forecast's cost to finish (the
  steps left at the measured rate, on the open segment's nodes and market);
- over the **last 30 days** of the job's spend, which its team pays: share x the cost of its ledger
  segments in that window x the share of the spend the evidence covers (GPU-monitor findings cover
  the measured GPU-hours only; step timings cover the run).

Fixes overlap (an input-bound job also has low utilization), so a job's avoidable spend is its
largest finding's, never their sum. What nobody measured is "not measured", never zero waste.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from orchestrator.contract import read_progress_records
from orchestrator.costs.ledger import LostWork, Window, segment_cost
from orchestrator.costs.lost_work import lost_work
from orchestrator.monitor.diagnosis import (
    NOT_MEASURED_CODE,
    Finding,
    GpuCandidate,
    StepTiming,
    diagnose,
    since_last_tune,
    unavailable_reason,
)
from orchestrator.monitor.recommend import RECOMMENDATION_CODES
from orchestrator.monitor.summary import read_summaries
from orchestrator.state.job_dir import PROGRESS_FILE, JobDir
from orchestrator.state.records import SegmentRecord
from orchestrator.state.store import JobStore
from orchestrator.state.usage import SUMMARY_GLOB, UsageStore

MONTH = timedelta(days=30)
"""The "past month" of avoidable spend."""

NOT_MEASURED = "not measured"

STEP_CODES = frozenset({"input-bound"})
"""Findings from the progress file's step timings (they cover the whole run)."""

TUNE_CODE = "tuned"
"""The entry for a saving the runtime's ``tune: auto`` already made (a credit, not a fix to make)."""

NOT_COUNTED = frozenset({TUNE_CODE, *RECOMMENDATION_CODES})
"""Entries listed and priced but never counted as a job's avoidable spend: the tuning credit, and the
recommendations whose gain assumes what nobody measured (that the job trains in 32-bit, that its
batch can grow without changing its results)."""


@dataclass(frozen=True)
class FixShare:
    """A finding's fix and the largest share of spend it saves, independent of any price.

    ``share`` None: not priced (``basis`` says why); ``coverage``: the share of the job's spend the
    evidence covers (0 to 1)."""

    code: str
    fix: str
    share: float | None
    basis: str
    coverage: float = 1.0
    message: str = ""
    severity: str = "info"

    @property
    def counted(self) -> bool:
        """Whether the fix counts toward the job's avoidable spend (see :data:`NOT_COUNTED`)."""
        return self.code not in NOT_COUNTED

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "counted": self.counted}


@dataclass(frozen=True)
class JobFixes:
    """A job's fixes; ``measured`` names what was measured (``step timings``, ``GPU use``) and
    ``not_measured`` what was not: with nothing measured the job's avoidable spend is not known."""

    fixes: tuple[FixShare, ...] = ()
    measured: tuple[str, ...] = ()
    not_measured: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return bool(self.measured)

    @property
    def avoidable_share(self) -> float | None:
        """The largest counted fix's share of the job's spend, times the share its evidence covers
        (fixes overlap, so never their sum); None when nothing was measured."""
        if not self.known:
            return None
        return max(
            (f.share * f.coverage for f in self.fixes if f.share is not None and f.counted), default=0.0
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "fixes": [f.to_dict() for f in self.fixes],
            "measured": list(self.measured),
            "not_measured": list(self.not_measured),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobFixes:
        """What :meth:`to_dict` wrote; raises KeyError, TypeError or ValueError when malformed."""
        fixes = tuple(_fix_from_dict(f) for f in data.get("fixes") or [])
        measured = tuple(map(str, data.get("measured") or ()))
        return cls(fixes, measured, tuple(map(str, data.get("not_measured") or ())))


def _fix_from_dict(data: Mapping[str, Any]) -> FixShare:
    share = data.get("share")
    return FixShare(
        code=str(data["code"]),
        fix=str(data["fix"]),
        share=None if share is None else _fraction(share),
        basis=str(data["basis"]),
        coverage=_fraction(data.get("coverage", 1.0)),
        message=str(data.get("message", "")),
        severity=str(data.get("severity", "info")),
    )


def _fraction(value: Any) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"{number} is not a share between 0 and 1")
    return number


@dataclass(frozen=True)
class PricedFix:
    """One fix priced: USD over the job's remaining work and over its last 30 days (None: unknown)."""

    job_id: str
    team: str
    fix: FixShare
    remaining_usd: float | None
    month_usd: float | None

    @property
    def ranking_usd(self) -> float:
        """What the fix is ranked by: the larger of its two figures (0 when neither is known)."""
        return max(self.remaining_usd or 0.0, self.month_usd or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "team": self.team,
            **self.fix.to_dict(),
            "remaining_usd": _usd(self.remaining_usd),
            "month_usd": _usd(self.month_usd),
        }


@dataclass(frozen=True)
class JobAvoidable:
    """A job's fixes priced, with the numbers they were priced from."""

    job_id: str
    team: str
    fixes: JobFixes
    priced: tuple[PricedFix, ...]
    to_finish_usd: float | None
    """The forecast's cost of the remaining work at the current price (None: no forecast)."""
    month_spend_usd: float
    saved_by_tuning_usd: float | None = None
    hourly_usd: float | None = None
    """The price of the job's nodes now (None when it does not run)."""

    @property
    def remaining_usd(self) -> float | None:
        """The largest fix over the remaining work (fixes overlap); None when not known."""
        return _largest(p.remaining_usd for p in self.priced if p.fix.counted)

    @property
    def month_usd(self) -> float | None:
        return _largest(p.month_usd for p in self.priced if p.fix.counted)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "team": self.team,
            "measured": list(self.fixes.measured),
            "not_measured": list(self.fixes.not_measured),
            "to_finish_usd": _usd(self.to_finish_usd),
            "hourly_usd": _usd(self.hourly_usd),
            "month_spend_usd": _usd(self.month_spend_usd),
            "avoidable_remaining_usd": _usd(self.remaining_usd),
            "avoidable_month_usd": _usd(self.month_usd),
            "saved_by_tuning_usd": _usd(self.saved_by_tuning_usd),
            "fixes": [p.to_dict() for p in self.priced],
        }


def _usd(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _largest(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def fix_of(finding: Finding, gpu_coverage: float) -> FixShare:
    """The :class:`FixShare` of a finding (``gpu_coverage``: the measured share of the job's
    GPU-hours, for findings from the GPU monitor)."""
    bound = finding.bound
    coverage = 1.0 if finding.code in STEP_CODES else gpu_coverage
    if bound is None:
        return FixShare(finding.code, finding.fix, 0.0, "costs no throughput", coverage, finding.message,
                        finding.severity)  # fmt: skip
    return FixShare(finding.code, finding.fix, bound.share, bound.basis, coverage, finding.message,
                    finding.severity)  # fmt: skip


def job_fixes(
    findings: Sequence[Finding], steps_measured: bool, gpu_coverage: float, extra: Sequence[FixShare] = ()
) -> JobFixes:
    """The fixes of a job's findings (``gpu_coverage`` 0: its GPU use was not measured), plus ``extra``
    ones (the right-size recommendation, priced by the right-size policy)."""
    measured: list[str] = []
    missing: list[str] = []
    (measured if steps_measured else missing).append("step timings")
    (measured if gpu_coverage > 0 else missing).append("GPU use")
    fixes = [fix_of(f, gpu_coverage) for f in findings if f.code != NOT_MEASURED_CODE]
    return JobFixes((*fixes, *extra), tuple(measured), tuple(missing))


def price(
    job_id: str,
    team: str,
    fixes: JobFixes,
    spend_usd: float,
    to_finish_usd: float | None,
    saved_by_tuning_usd: float | None = None,
    hourly_usd: float | None = None,
) -> JobAvoidable:
    """Price ``fixes`` over ``spend_usd`` (the job's spend in the window) and the remaining work."""
    priced = []
    for fix in fixes.fixes:
        if fix.share is None:
            priced.append(PricedFix(job_id, team, fix, None, None))
            continue
        remaining = None if to_finish_usd is None else fix.share * to_finish_usd
        priced.append(PricedFix(job_id, team, fix, remaining, fix.share * spend_usd * fix.coverage))
    priced.sort(key=lambda p: (p.fix.share is None, -p.ranking_usd, p.fix.code))
    return JobAvoidable(
        job_id, team, fixes, tuple(priced), to_finish_usd, spend_usd, saved_by_tuning_usd, hourly_usd
    )


def month_spend(segments: Iterable[SegmentRecord], now: datetime) -> float:
    """The cost of ``segments`` in the 30 days up to ``now``."""
    window = Window(now - MONTH, now)
    return sum(segment_cost(s, now, window).cost_usd for s in segments)


@dataclass(frozen=True)
class Tuned:
    """A ``tune`` progress record: when the runtime's ``tune: auto`` finished, step times before and after."""

    at: datetime
    before_step_s: float
    after_step_s: float


@dataclass(frozen=True)
class JobProgress:
    """What a progress file says for the diagnosis, read once: the step timings since the last ``tune``
    record (the input pipeline the job runs with now), its tune records, and the GPU memory headroom
    the runtime last measured (None: not measured)."""

    steps: list[StepTiming]
    tuned: list[Tuned]
    headroom: float | None = None
    lost: LostWork | None = None
    """The work lost to preemptions (None: no progress file)."""


def read_job_progress(path: Path) -> JobProgress:
    """The :class:`JobProgress` of a progress file (empty when it is missing)."""
    if not path.is_file():
        return JobProgress([], [])
    records = read_progress_records(path)
    tuned = [
        Tuned(r.time, r.tune.before_step_s, r.tune.after_step_s)
        for r in records
        if r.tune is not None and r.time is not None
    ]
    steps, headroom = since_last_tune(records)
    return JobProgress(steps, tuned, headroom, lost_work(records))


def read_job_fixes(
    job_dir: Path,
    windows: Sequence[dict[str, Any]],
    gpu_hours: float,
    progress: JobProgress,
    gpu_memory_gib: float | None = None,
    candidates: Iterable[GpuCandidate] = (),
    extra: Sequence[FixShare] = (),
    gpu_type: str | None = None,
    summaries: Sequence[Path] | None = None,
) -> tuple[list[Finding], JobFixes]:
    """A job's findings (from its ``progress`` and its monitor ``windows``) and their fixes;
    ``gpu_hours``: the job's GPU-hours in the ledger (how much of them the windows cover);
    ``summaries``: the job's monitor summary files, when the caller knows them (else listed)."""
    why = unavailable_reason(JobDir(job_dir).monitor_summaries() if summaries is None else summaries)
    findings = diagnose(windows, progress.steps, gpu_memory_gib, candidates, unmeasured_reason=why,
                        gpu_type=gpu_type, tuned_headroom=progress.headroom)  # fmt: skip
    measured_s = sum(float(w.get("duration_s") or 0.0) * int(w.get("gpus") or 0) for w in windows)
    coverage = min(1.0, measured_s / 3600.0 / gpu_hours) if gpu_hours > 0 else (1.0 if measured_s else 0.0)
    return findings, job_fixes(findings, bool(progress.steps), coverage, extra)


def saved_by_tuning(
    tuned: Sequence[Tuned], segments: Sequence[SegmentRecord], now: datetime, window: Window | None = None
) -> float | None:
    """USD the runtime's ``tune: auto`` saved: the spend of the segments after each tune record (inside
    ``window``) at the step time before, minus what it cost at the step time after (the same work in
    less time); None without a tune record that made steps faster."""
    total, found = 0.0, False
    for tune in tuned:
        if tune.before_step_s <= 0 or tune.after_step_s <= 0 or tune.after_step_s >= tune.before_step_s:
            continue
        found = True
        start = tune.at if window is None else max(tune.at, window.start)
        end = now if window is None else min(now, window.end)
        if end <= start:
            continue
        spent = sum(segment_cost(s, now, Window(start, end)).cost_usd for s in segments)
        total += spent * (tune.before_step_s / tune.after_step_s - 1.0)
    return total if found else None


def store_fixes(store: JobStore, now: datetime) -> tuple[dict[str, JobFixes], dict[str, list[Tuned]]]:
    """Every stored job's fixes (from its progress file and monitor windows; the GPU types it could
    move to are the CLI's to add) and its ``tune`` records; a job whose files cannot be read is left
    out (not measured)."""
    usage = UsageStore(store)
    fixes: dict[str, JobFixes] = {}
    tuned: dict[str, list[Tuned]] = {}
    for job in store.list_jobs():
        folder = store.job_dir(job.id)
        windows = usage.windows(job.id) or [
            w for f in sorted(folder.glob(SUMMARY_GLOB)) for w in read_summaries(f)
        ]
        segments = store.segments(job.id)
        gpu_hours = sum(s.hours(now) * s.gpus for s in segments)
        progress = read_job_progress(folder / PROGRESS_FILE)
        gpu_type = segments[-1].gpu_type if segments else None
        fixes[job.id] = read_job_fixes(folder, windows, gpu_hours, progress, gpu_type=gpu_type)[1]
        if progress.tuned:
            tuned[job.id] = progress.tuned
    return fixes, tuned
