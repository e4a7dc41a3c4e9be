"""A :class:`JobState` kept in the job store's rows (local and SLURM controllers).

:func:`load_state` reads it from the ``jobs``, ``attempts``, ``nodes`` and ``segments`` tables;
:func:`save_state` writes what changed between two states, and the engine's events, inside the
caller's transaction, so a tick's state is committed whole or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import (
    ColumnElement,
    Connection,
    Text,
    bindparam,
    cast,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB

from orchestrator.spec.market import MarketKind
from orchestrator.state.job_state import (
    JobEvent,
    JobState,
    NodeLaunch,
    NodeState,
    RightSizePick,
    SegmentState,
    ZoneMemory,
)
from orchestrator.state.leases import Fence, LeaseLost, fence_cte
from orchestrator.state.placement import Placement, flat_placement
from orchestrator.state.prepared import Prepared
from orchestrator.state.progress_state import GpuThroughput, ProgressState
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.row_check import DamagedRow
from orchestrator.state.store import JobRows, JobStore
from orchestrator.state.tables import attempts, events, jobs, nodes, segments
from orchestrator.state.watch import WaitReason, WatchState


def _ts(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


_PLACEMENT = TypeAdapter(Placement)
"""An attempt's placement as its ``attempts`` row keeps it (a JSON object, snake_case keys)."""


def segment_state(record: SegmentRecord) -> SegmentState:
    """The segment of a job's state that ``record`` holds (ValueError: its market is not one gpuctl
    writes)."""
    placement = flat_placement(record)
    return SegmentState(attempt=record.attempt, placement=placement, nodes=record.nodes,
                        started_at=record.started_at, ended_at=record.ended_at, end_reason=record.end_reason)  # fmt: skip


def load_state(store: JobStore, job_id: str, job: JobRecord | JobRows | None = None) -> JobState:
    """The job's state from its rows; :class:`DamagedRow` (noted in the store) when one of them, or
    what its JSON columns hold, cannot be read: the controller must not act on part of a job.
    ``job``: its ``jobs`` row (or :class:`JobRows`: with its options and placement), when the caller
    has just read it (not read again)."""
    rows = job if isinstance(job, JobRows) and job.record.id == job_id else None
    if rows is not None:
        job = rows.record
    job = job if isinstance(job, JobRecord) and job.id == job_id else store.job(job_id)
    if rows is not None:  # read with the row (a controller round reads its jobs' rows at once)
        nodes = store.nodes_in(rows) if job.attempts else []
        segments = store.segments_in(rows)
    else:
        nodes = store.nodes(job.id, job.attempts) if job.attempts else []
        segments = store.segments(job.id, strict=True)
    placement = _placement(store, job.id, job.attempts, rows)
    options = store.options_in(rows) if rows is not None else store.job_options(job.id)
    try:
        kept = _kept_options(options, job.attempts)
    except (
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
    ) as exc:  # pydantic's ValidationError is a ValueError
        what = f"the options gpuctl keeps for a job ({type(exc).__name__})"
        raise store.note_damage(_options_damage(store, job.id, options, what)) from None
    return JobState(
        status=job.status,
        failure_reason=job.failure_reason,
        message=job.message,
        attempt=job.attempts,
        placement=placement,
        attempt_nodes=tuple(
            NodeState(node_id=n.node_id, launch=NodeLaunch(n.launch_state), notice_at=n.notice_at)
            for n in nodes
        ),
        segments=_segments(store, segments),
        restarts=job.restarts,
        preemptions=job.preemptions,
        deadline=job.deadline,
        **kept,
        zone_history=_zone_history(store, job.id, options),
    )


def _segments(store: JobStore, records: Sequence[SegmentRecord]) -> tuple[SegmentState, ...]:
    found = []
    for record in records:
        try:
            found.append(segment_state(record))
        except ValueError:
            damage = DamagedRow(store.path, record.job_id, "segments", "market", record.market,
                                "one of " + ", ".join(MarketKind), f"segments:{record.id}.market")  # fmt: skip
            raise store.note_damage(damage) from None
    return tuple(found)


def _placement(store: JobStore, job_id: str, attempt: int, rows: JobRows | None) -> Placement | None:
    if not attempt:
        return None
    found = store.placement_in(rows) if rows is not None else store.attempt_placement(job_id, attempt)
    if not found:
        return None
    try:
        return _PLACEMENT.validate_python(found)
    except ValueError:  # pydantic's ValidationError
        damage = DamagedRow(store.path, job_id, "attempts", "placement_json", found,
                            "a placement gpuctl wrote", f"attempts:{job_id}:{attempt}.placement_json")  # fmt: skip
        raise store.note_damage(damage) from None


def _kept_options(options: dict[str, Any], attempt: int) -> dict[str, Any]:
    """The :class:`JobState` fields kept in the job's options."""
    sizing = options.get("right_size")
    return {
        "preempted_in_attempt": bool(options.get("preempted_in_attempt", {}).get(str(attempt))),
        "right_size": RightSizePick(gpu_type=sizing["gpu_type"], apply=bool(sizing["apply"]))
        if sizing
        else None,
        "budget_alerts": tuple(int(p) for p in options.get("budget_alerts", ())),
        "watch": WatchState.model_validate(options.get("watch") or {}),
        "waiting": WaitReason.model_validate(options["waiting"]) if options.get("waiting") else None,
        "progress": ProgressState.model_validate(options["progress"]) if options.get("progress") else None,
        "measurements": GpuThroughput.model_validate(options["measurements"])
        if options.get("measurements")
        else None,
    }


def _zone_history(store: JobStore, job_id: str, options: dict[str, Any]) -> ZoneMemory | None:
    """The zone history kept in the job's options; a job of an older gpuctl kept it in its own table."""
    try:
        if options.get("zone_history"):
            return ZoneMemory.model_validate(options["zone_history"])
        saved = store.market_history(job_id)
        return None if saved is None else ZoneMemory.model_validate({**saved[1], "at": saved[0]})
    except ValueError:  # pydantic's ValidationError
        what = "the zone history gpuctl keeps for a job"
        raise store.note_damage(_options_damage(store, job_id, options, what)) from None


def _options_damage(store: JobStore, job_id: str, options: dict[str, Any], what: str) -> DamagedRow:
    return DamagedRow(
        store.path, job_id, "jobs", "options_json", options, what, f"jobs:{job_id}.options_json"
    )


_JOB_VALUES: dict[str, Any] = {
    "status": bindparam("status"), "failure_reason": bindparam("failure_reason"), "message": bindparam("message"),
    "updated_at": bindparam("updated_at"), "attempts": bindparam("attempts"),
    "preemptions": bindparam("preemptions"), "restarts": bindparam("restarts"),
}  # fmt: skip
_SAVE_JOB = Prepared(update(jobs).where(jobs.c.id == bindparam("job_id")).values(**_JOB_VALUES))
_SAVE_JOB_AND_OPTIONS: dict[tuple[str, tuple[str, ...]], Prepared] = {}
"""(dialect, option keys) -> the job's row update that also sets those keys of its options."""


def _save_job_and_options(dialect: str, keys: tuple[str, ...]) -> Prepared:
    """The ``jobs`` row's update that also sets ``keys`` of its options (a JSON object) in the same
    statement: PostgreSQL merges the ``options`` parameter (``jsonb ||``), SQLite sets each key to
    its ``o_<key>`` parameter (``json_set``); every other key is kept as stored."""
    found = _SAVE_JOB_AND_OPTIONS.get((dialect, keys))
    if found is None:
        assert all(k.isidentifier() for k in keys), keys  # the JSON paths below are written literally
        merged: ColumnElement[Any]
        if dialect == "postgresql":
            merged = _pg_merged()
        else:
            paths: list[ColumnElement[Any]] = []
            for k in keys:
                paths += [literal_column(f"'$.{k}'"), func.json(bindparam(f"o_{k}"))]
            merged = func.json_set(jobs.c.options_json, *paths)
        statement = (
            update(jobs).where(jobs.c.id == bindparam("job_id")).values(**_JOB_VALUES, options_json=merged)
        )
        found = _SAVE_JOB_AND_OPTIONS[(dialect, keys)] = Prepared(statement)
    return found


def _pg_merged() -> ColumnElement[Any]:
    """The job's options with the ``options`` parameter's keys merged in (PostgreSQL's ``jsonb ||``)."""
    return cast(cast(jobs.c.options_json, JSONB).op("||")(cast(bindparam("options"), JSONB)), Text)


_FENCE = fence_cte()  # its job id is b_job_id: a parameter named as a column would be SET there
_FENCED_SAVE = Prepared(
    update(jobs)
    .where(jobs.c.id == bindparam("b_job_id"), jobs.c.id.in_(select(_FENCE.c.job_id)))
    .values(**_JOB_VALUES, options_json=_pg_merged())
    .returning(jobs.c.id)
)
"""The ``jobs`` row's update, its options merged, written only while the job's lease holds
(:func:`~orchestrator.state.leases.fence_cte`): fence and write in one statement (PostgreSQL)."""


_ADD_ATTEMPT = Prepared(insert(attempts))
_ADD_EVENT = Prepared(insert(events))
_ADD_NODE = Prepared(insert(nodes))
_SAVE_NODE = Prepared(
    update(nodes)
    .where(nodes.c.node_id == bindparam("b_id"))
    .values(launch_state=bindparam("launch_state"), notice_at=bindparam("notice_at"),
            ended_at=func.coalesce(nodes.c.ended_at, bindparam("ended")))
)  # fmt: skip
_SEGMENT_IDS = Prepared(
    select(segments.c.id).where(segments.c.job_id == bindparam("id")).order_by(segments.c.id)
)
_SAVE_SEGMENT = Prepared(
    update(segments)
    .where(segments.c.id == bindparam("b_id"))
    .values(
        started_at=bindparam("started_at"), ended_at=bindparam("ended_at"), end_reason=bindparam("end_reason")
    )
)
_ADD_SEGMENT = Prepared(insert(segments))
_JOB_OPTIONS = Prepared(select(jobs.c.options_json).where(jobs.c.id == bindparam("id")))
_SAVE_OPTIONS = Prepared(
    update(jobs).where(jobs.c.id == bindparam("b_id")).values(options_json=bindparam("options"))
)


def _text(value: str | None) -> str | None:
    """An enum member (a ``StrEnum``) as the plain text stored."""
    return None if value is None else str(value)


def save_state(
    conn: Connection,
    job_id: str,
    old: JobState,
    new: JobState,
    events: Sequence[JobEvent],
    now: datetime,
) -> None:
    """Write the difference ``old`` -> ``new`` and ``events`` (inside the caller's transaction): the
    ``jobs`` row and the options that changed in one statement where the database can merge them."""
    row = _row_params(job_id, new, now)
    updates = _option_updates(old, new)
    merged = _merge_params(conn.dialect.name, updates) if updates else None
    if merged is None:
        _SAVE_JOB.run(conn, row)
    else:
        _save_job_and_options(conn.dialect.name, tuple(updates)).run(conn, {**row, **merged})
    if new.attempt != old.attempt and new.placement is not None:
        placement = _PLACEMENT.dump_python(new.placement, mode="json")
        _ADD_ATTEMPT.run(conn, {"job_id": job_id, "attempt": new.attempt,
                                    "placement_json": json.dumps(placement), "started_at": _ts(now)})  # fmt: skip
    _save_nodes(conn, job_id, old, new, now)
    _save_segments(conn, job_id, old, new)
    if updates and merged is None:
        _save_options(conn, job_id, updates)
    if events:
        _ADD_EVENT.run_many(conn, [
            {"job_id": job_id, "time": _ts(now), "kind": e.kind, "message": e.message, "status": _text(e.status)}
            for e in events
        ])  # fmt: skip


@dataclass(frozen=True)
class RowWrite:
    """A tick's write that is the job's row and options alone, fenced by the job's lease
    (:func:`row_write`): written by :func:`save_row`, or with others by :func:`save_rows`."""

    job_id: str
    params: dict[str, Any]


def row_write(
    store: JobStore,
    job_id: str,
    old: JobState,
    new: JobState,
    events: Sequence[JobEvent],
    now: datetime,
    fence: Fence,
) -> RowWrite | None:
    """:func:`save_state`'s write as one statement that carries its lease's ``fence``, when that is
    all the write is (PostgreSQL; the job's row and options changed, nothing else: a running job's
    tick); None when it needs :func:`save_state` in a fenced transaction."""
    if store.sqlite or events or new.attempt != old.attempt or new.attempt_nodes != old.attempt_nodes:
        return None
    if new.segments != old.segments:
        return None
    updates = _option_updates(old, new)
    merged = _merge_params("postgresql", updates) if updates else {"options": "{}"}
    if merged is None:
        return None  # read, merged and written back as text: in a transaction
    row = _row_params(job_id, new, now)
    del row["job_id"]  # the fence's b_job_id names the row
    return RowWrite(job_id, {**row, **merged, **fence.params()})


def save_row(store: JobStore, write: RowWrite) -> None:
    """``write`` as one statement, its own transaction (one round trip instead of ``BEGIN``, the
    fence, the write and ``COMMIT``); :class:`LeaseLost` when the lease no longer holds (nothing
    was written)."""
    if not store.statement(lambda conn: _FENCED_SAVE.rows(conn, write.params)):
        raise LeaseLost(write.job_id)


def save_rows(store: JobStore, writes: Sequence[RowWrite]) -> set[str]:
    """Each of ``writes`` as its own statement, all sent in one round trip (psycopg's pipeline), in
    job id order (as leases are locked: two controllers never deadlock); the ids of the jobs written
    (the others' leases no longer hold: nothing of theirs was written)."""
    ordered = sorted(writes, key=lambda w: w.job_id)
    if not ordered:
        return set()
    found = store.statement(lambda conn: _FENCED_SAVE.returned_many(conn, [w.params for w in ordered]))
    return {str(row[0]) for row in found}


def _row_params(job_id: str, new: JobState, now: datetime) -> dict[str, Any]:
    return {
        "job_id": job_id, "status": _text(new.status), "failure_reason": _text(new.failure_reason),
        "message": new.message, "updated_at": _ts(now), "attempts": new.attempt, "preemptions": new.preemptions,
        "restarts": new.restarts,
    }  # fmt: skip


def _save_nodes(conn: Connection, job_id: str, old: JobState, new: JobState, now: datetime) -> None:
    before = {n.node_id: n for n in old.attempt_nodes} if new.attempt == old.attempt else {}
    for node in new.attempt_nodes:
        was = before.get(node.node_id)
        ended = _ts(now) if node.launch is NodeLaunch.ENDED else None
        if was is None:
            _ADD_NODE.run(conn, {
                "node_id": node.node_id, "job_id": job_id, "attempt": new.attempt, "launch_state": _text(node.launch),
                "created_at": _ts(now), "notice_at": _ts(node.notice_at), "ended_at": ended,
            })  # fmt: skip
        elif was != node:
            _SAVE_NODE.run(conn, {"b_id": node.node_id, "launch_state": _text(node.launch),
                                      "notice_at": _ts(node.notice_at), "ended": ended})  # fmt: skip


def _save_segments(conn: Connection, job_id: str, old: JobState, new: JobState) -> None:
    if new.segments == old.segments:
        return  # a running job's tick, mostly
    ids = [row["id"] for row in _SEGMENT_IDS.rows(conn, {"id": job_id})]
    for index, segment in enumerate(new.segments):
        if index < len(old.segments) and index < len(ids):
            if old.segments[index] != segment:
                _SAVE_SEGMENT.run(conn, {
                    "b_id": ids[index], "started_at": _ts(segment.started_at), "ended_at": _ts(segment.ended_at),
                    "end_reason": segment.end_reason,
                })  # fmt: skip
            continue
        p = segment.placement
        _ADD_SEGMENT.run(conn, {
            "job_id": job_id, "attempt": segment.attempt, "gpu_type": p.gpu_type, "instance_type": p.instance_type,
            "market": _text(p.market), "cloud": p.cloud, "region": p.region, "zone": p.zone, "nodes": segment.nodes,
            "gpus_per_node": p.gpus_per_node, "started_at": _ts(segment.started_at),
            "ended_at": _ts(segment.ended_at), "end_reason": segment.end_reason,
            "node_price_usd_per_hour": p.node_price_usd_per_hour,
            "on_demand_node_price_usd_per_hour": p.on_demand_node_price_usd_per_hour, "price_source": p.price_source,
        })  # fmt: skip


def _merge_params(dialect: str, updates: dict[str, Any]) -> dict[str, str] | None:
    """The parameters of :func:`_save_job_and_options` for ``updates``; None when the database could
    not keep them as Python's JSON writes them (NaN or infinity, a NUL character, a lone surrogate):
    those are read, merged and written back as text (:func:`_save_options`)."""
    try:
        texts = {k: json.dumps(v, allow_nan=False) for k, v in updates.items()}
        for value in updates.values():
            json.dumps(value, ensure_ascii=False).encode()  # UnicodeEncodeError: a lone surrogate
    except ValueError:
        return None
    if any("\\u0000" in t for t in texts.values()):
        return None
    if dialect == "postgresql":
        return {"options": json.dumps(updates)}
    return {f"o_{k}": t for k, t in texts.items()}


def _option_updates(old: JobState, new: JobState) -> dict[str, Any]:
    """The keys of the job's options that change from ``old`` to ``new``, and their new values."""
    updates: dict[str, Any] = {}
    if new.right_size != old.right_size and new.right_size is not None:
        updates["right_size"] = new.right_size.model_dump(mode="json")
    if new.budget_alerts != old.budget_alerts:
        updates["budget_alerts"] = list(new.budget_alerts)
    if new.preempted_in_attempt != old.preempted_in_attempt or new.attempt != old.attempt:
        updates["preempted_in_attempt"] = {str(new.attempt): new.preempted_in_attempt}
    if new.watch != old.watch:
        updates["watch"] = new.watch.model_dump(mode="json", exclude_none=True)
    if new.waiting != old.waiting:
        updates["waiting"] = new.waiting.model_dump(mode="json") if new.waiting else None
    if new.zone_history != old.zone_history:
        updates["zone_history"] = new.zone_history.model_dump(mode="json") if new.zone_history else None
    if new.progress != old.progress:
        updates["progress"] = (
            new.progress.model_dump(mode="json", exclude_none=True) if new.progress else None
        )
    if new.measurements != old.measurements:
        updates["measurements"] = (
            new.measurements.model_dump(mode="json", exclude_none=True) if new.measurements else None
        )
    return updates


def _save_options(conn: Connection, job_id: str, updates: dict[str, Any]) -> None:
    found = _JOB_OPTIONS.scalar(conn, {"id": job_id})
    options = dict(json.loads(found)) if found is not None else {}
    options.update(updates)
    _SAVE_OPTIONS.run(conn, {"b_id": job_id, "options": json.dumps(options)})
