"""A :class:`JobState` kept in the SQLite store's rows (local and SLURM controllers).

:func:`load_state` reads it from the ``jobs``, ``attempts``, ``nodes`` and ``segments`` tables;
:func:`save_state` writes what changed between two states, and the engine's events, inside the
caller's transaction, so a tick's state is committed whole or not at all.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter

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
from orchestrator.state.placement import Placement, flat_placement
from orchestrator.state.progress_state import GpuThroughput, ProgressState
from orchestrator.state.records import SegmentRecord
from orchestrator.state.row_check import DamagedRow
from orchestrator.state.store import JobStore
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


def load_state(store: JobStore, job_id: str) -> JobState:
    """The job's state from its rows; :class:`DamagedRow` (noted in the store) when one of them, or
    what its JSON columns hold, cannot be read: the controller must not act on part of a job."""
    job = store.job(job_id)
    nodes = store.nodes(job.id, job.attempts) if job.attempts else []
    segments = store.segments(job.id, strict=True)
    placement = _placement(store, job.id, job.attempts)
    options = store.job_options(job.id)
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


def _placement(store: JobStore, job_id: str, attempt: int) -> Placement | None:
    found = store.attempt_placement(job_id, attempt) if attempt else None
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


def save_state(
    conn: sqlite3.Connection,
    job_id: str,
    old: JobState,
    new: JobState,
    events: Sequence[JobEvent],
    now: datetime,
) -> None:
    """Write the difference ``old`` -> ``new`` and ``events`` (inside the caller's transaction)."""
    conn.execute(
        "UPDATE jobs SET status = ?, failure_reason = ?, message = ?, updated_at = ?, attempts = ?,"
        " preemptions = ?, restarts = ? WHERE id = ?",
        (new.status, new.failure_reason, new.message, _ts(now), new.attempt, new.preemptions, new.restarts,
         job_id),
    )  # fmt: skip
    if new.attempt != old.attempt and new.placement is not None:
        placement = _PLACEMENT.dump_python(new.placement, mode="json")
        conn.execute(
            "INSERT INTO attempts (job_id, attempt, placement_json, started_at) VALUES (?,?,?,?)",
            (job_id, new.attempt, json.dumps(placement), _ts(now)),
        )
    _save_nodes(conn, job_id, old, new, now)
    _save_segments(conn, job_id, old, new)
    _save_options(conn, job_id, old, new)
    conn.executemany(
        "INSERT INTO events (job_id, time, kind, message, status) VALUES (?,?,?,?,?)",
        [(job_id, _ts(now), e.kind, e.message, e.status) for e in events],
    )


def _save_nodes(conn: sqlite3.Connection, job_id: str, old: JobState, new: JobState, now: datetime) -> None:
    before = {n.node_id: n for n in old.attempt_nodes} if new.attempt == old.attempt else {}
    for node in new.attempt_nodes:
        was = before.get(node.node_id)
        ended = _ts(now) if node.launch is NodeLaunch.ENDED else None
        if was is None:
            conn.execute(
                "INSERT INTO nodes (node_id, job_id, attempt, launch_state, created_at, notice_at, ended_at)"
                " VALUES (?,?,?,?,?,?,?)",
                (node.node_id, job_id, new.attempt, node.launch, _ts(now), _ts(node.notice_at), ended),
            )
        elif was != node:
            conn.execute(
                "UPDATE nodes SET launch_state = ?, notice_at = ?, ended_at = COALESCE(ended_at, ?)"
                " WHERE node_id = ?",
                (node.launch, _ts(node.notice_at), ended, node.node_id),
            )


def _save_segments(conn: sqlite3.Connection, job_id: str, old: JobState, new: JobState) -> None:
    ids = [r[0] for r in conn.execute("SELECT id FROM segments WHERE job_id = ? ORDER BY id", (job_id,))]
    for index, segment in enumerate(new.segments):
        if index < len(old.segments) and index < len(ids):
            if old.segments[index] != segment:
                conn.execute(
                    "UPDATE segments SET started_at = ?, ended_at = ?, end_reason = ? WHERE id = ?",
                    (_ts(segment.started_at), _ts(segment.ended_at), segment.end_reason, ids[index]),
                )
            continue
        p = segment.placement
        conn.execute(
            "INSERT INTO segments (job_id, attempt, gpu_type, instance_type, market, cloud, region, zone, nodes,"
            " gpus_per_node, started_at, ended_at, end_reason, node_price_usd_per_hour,"
            " on_demand_node_price_usd_per_hour, price_source) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                job_id, segment.attempt, p.gpu_type, p.instance_type, p.market, p.cloud, p.region, p.zone,
                segment.nodes, p.gpus_per_node, _ts(segment.started_at), _ts(segment.ended_at),
                segment.end_reason, p.node_price_usd_per_hour, p.on_demand_node_price_usd_per_hour,
                p.price_source,
            ),
        )  # fmt: skip


def _save_options(conn: sqlite3.Connection, job_id: str, old: JobState, new: JobState) -> None:
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
    if not updates:
        return
    row = conn.execute("SELECT options_json FROM jobs WHERE id = ?", (job_id,)).fetchone()
    options = dict(json.loads(row[0])) if row else {}
    options.update(updates)
    conn.execute("UPDATE jobs SET options_json = ? WHERE id = ?", (json.dumps(options), job_id))
