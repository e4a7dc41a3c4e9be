"""What a report reads: job and segment records from a ledger source, plus optional monitor data.

A ledger source is anything with the job store's two read methods (see :class:`LedgerSource`).
``gpuctl cost report --input FILE`` reads the same records from a JSON export instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from orchestrator.contract.fields import require_finite
from orchestrator.costs.avoidable import JobFixes, Tuned
from orchestrator.costs.ledger import LostWork
from orchestrator.costs.projection import costs_to_finish
from orchestrator.errors import UserError
from orchestrator.state.ledger_read import read_segments
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore
from orchestrator.state.usage import UsageStore
from orchestrator.times import parse_iso
from orchestrator.userfiles import MAX_DATA_BYTES, read_text


class LedgerSource(Protocol):
    def list_jobs(self) -> Sequence[JobRecord]: ...

    def segments(
        self, job_id: str | None = None, since: datetime | None = None
    ) -> Sequence[SegmentRecord]: ...


@dataclass(frozen=True)
class ReportInputs:
    jobs: list[JobRecord]
    segments: list[SegmentRecord]
    idle: dict[str, float] | None = None
    lost: dict[str, LostWork] = field(default_factory=dict)
    to_finish: dict[str, float] = field(default_factory=dict)
    """Running job id -> forecast USD to finish at the current market (the projected-spend column)."""
    measured: dict[str, float] | None = None
    """Job id -> GPU-hours the monitor windows cover (with ``idle``: a job in neither was not
    measured). ``None`` with ``idle`` set: an export written before these were kept."""
    fixes: dict[str, JobFixes] | None = None
    """Job id -> its diagnosis fixes (:mod:`orchestrator.costs.avoidable`): the avoidable column and the
    top fixes; a job not in it was not diagnosed ("not measured"); ``None``: not computed at all."""
    tuned: dict[str, list[Tuned]] = field(default_factory=dict)
    """Job id -> its ``tune`` records (``tune: auto``), for the saving the report credits."""
    notes: list[str] = field(default_factory=list)
    """What the source leaves out, said in every format of the report (GPUJobs deleted before a report
    read from the cluster are missing from it)."""


def read_ledger(source: LedgerSource, since: datetime | None = None) -> ReportInputs:
    """Jobs and the segments that may overlap ``since``..now (the store filters by end time).

    A source that also has ``idle_gpu_hours()`` and ``measured_gpu_hours()`` (each a mapping of job
    id to GPU-hours, from monitor window summaries) supplies idle time and efficiency.
    """
    idle, measured = _reader(source, "idle_gpu_hours"), _reader(source, "measured_gpu_hours")
    if isinstance(source, JobStore):
        idle, measured = stored_usage(source)
    to_finish = costs_to_finish(source, datetime.now(UTC)) if isinstance(source, JobStore) else {}
    return ReportInputs(jobs=list(source.list_jobs()), segments=list(source.segments(since=since)), idle=idle,
                        to_finish=to_finish, measured=measured if idle is not None else None)  # fmt: skip


def stored_usage(store: JobStore) -> tuple[dict[str, float], dict[str, float]]:
    """(idle, measured) GPU-hours of each job with stored monitor windows that measured something."""
    usages = UsageStore(store)
    idle, measured = {}, {}
    for job in store.list_jobs():
        usage = usages.usage(job.id)
        if usage is not None and usage.measured_gpu_hours > 0:
            idle[job.id], measured[job.id] = usage.idle_gpu_hours, usage.measured_gpu_hours
    return idle, measured


def read_store_ledger(store: JobStore, since: datetime | None = None) -> ReportInputs:
    """:func:`read_ledger` of the job store, read in bulk: the jobs, the segments and the monitor
    windows' aggregates in one query each (the same records, and damaged rows noted, as there)."""
    jobs = list(store.list_jobs())
    usage = UsageStore(store).every_usage()
    idle, measured = {}, {}
    for job in jobs:
        found = usage.get(job.id)
        if found is not None and found.measured_gpu_hours > 0:
            idle[job.id], measured[job.id] = found.idle_gpu_hours, found.measured_gpu_hours
    to_finish = costs_to_finish(store, datetime.now(UTC), jobs)  # before the segments, as read_ledger
    return ReportInputs(jobs=jobs, segments=read_segments(store, since), idle=idle, to_finish=to_finish,
                        measured=measured)  # fmt: skip


def _reader(source: object, name: str) -> dict[str, float] | None:
    read = getattr(source, name, None)
    return {str(k): float(v) for k, v in read().items()} if callable(read) else None


def _encode(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def inputs_to_json(inputs: ReportInputs) -> str:
    """A JSON export of report inputs, readable by :func:`inputs_from_json`."""
    return json.dumps(
        {
            "jobs": [{k: _encode(v) for k, v in asdict(j).items()} for j in inputs.jobs],
            "segments": [{k: _encode(v) for k, v in s._asdict().items()} for s in inputs.segments],
            "idle_gpu_hours": inputs.idle,
            "measured_gpu_hours": inputs.measured,
            "lost_work": {k: asdict(v) for k, v in inputs.lost.items()},
            "cost_to_finish_usd": inputs.to_finish,
            "avoidable": None if inputs.fixes is None else {k: v.to_dict() for k, v in inputs.fixes.items()},
            "tuned": {k: [[t.at.isoformat(), t.before_step_s, t.after_step_s] for t in v]
                      for k, v in inputs.tuned.items()},
            "notes": inputs.notes,
        }
    )  # fmt: skip


def _time(value: Any) -> datetime | None:
    return None if value is None else parse_iso(str(value))


def _job(row: dict[str, Any]) -> JobRecord:
    names = {f.name for f in fields(JobRecord)}
    data = {k: v for k, v in row.items() if k in names}
    data["status"] = JobStatus(data["status"])
    data["failure_reason"] = FailureReason(data["failure_reason"]) if data.get("failure_reason") else None
    for key in ("submitted_at", "deadline", "updated_at"):
        data[key] = _time(data.get(key))
    return JobRecord(**data)


def _segment(row: dict[str, Any]) -> SegmentRecord:
    names = set(SegmentRecord._fields)
    data = {k: v for k, v in row.items() if k in names}
    data["started_at"] = _time(data["started_at"])
    data["ended_at"] = _time(data.get("ended_at"))
    return SegmentRecord(**data)


def inputs_from_json(text: str, source: str = "ledger export") -> ReportInputs:
    try:
        doc = json.loads(text)
        require_finite(doc)  # NaN, Infinity or 1e400 would reach the report (and its JSON) as they are
        idle, measured = doc.get("idle_gpu_hours"), doc.get("measured_gpu_hours")
        return ReportInputs(
            jobs=[_job(r) for r in doc.get("jobs", [])],
            segments=[_segment(r) for r in doc.get("segments", [])],
            idle={str(k): float(v) for k, v in idle.items()} if idle is not None else None,
            lost={str(k): LostWork(**v) for k, v in (doc.get("lost_work") or {}).items()},
            to_finish={str(k): float(v) for k, v in (doc.get("cost_to_finish_usd") or {}).items()},
            measured={str(k): float(v) for k, v in measured.items()} if measured is not None else None,
            fixes=_fixes(doc.get("avoidable")),
            tuned={str(k): [_tuned(t) for t in v] for k, v in (doc.get("tuned") or {}).items()},
            notes=[str(n) for n in doc.get("notes") or []],
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError) as exc:
        raise UserError(
            f"{source}: not a gpuctl ledger export ({type(exc).__name__}: {exc})",
            "give a file written by gpuctl (keys: jobs, segments, idle_gpu_hours, measured_gpu_hours, lost_work)",
        ) from exc


def _fixes(found: Any) -> dict[str, JobFixes] | None:
    return None if found is None else {str(k): JobFixes.from_dict(v) for k, v in found.items()}


def _tuned(row: Any) -> Tuned:
    at, before, after = row
    moment = datetime.fromisoformat(str(at))
    if moment.tzinfo is None:
        raise ValueError(f"tune time {at!r} has no UTC offset")
    return Tuned(moment, float(before), float(after))


def read_inputs_file(path: Path | str) -> ReportInputs:
    """``gpuctl cost report --input FILE``: a ledger export, read as :mod:`orchestrator.userfiles` reads
    every input file (a regular UTF-8 file of at most 1 GiB)."""
    fix = "give --input a ledger export written by gpuctl"
    return inputs_from_json(read_text(path, "ledger export", fix, MAX_DATA_BYTES), str(path))
