"""The outbox: notifications waiting to be delivered, in SQLite, so that a crash loses none.

The local and SLURM controllers keep it in the job store (table ``notifications``) and write a tick's
notifications in the tick's own transaction (:func:`enqueue`): they exist exactly when the state
change that made them was committed. The delivery worker (:mod:`orchestrator.notify.worker`) takes
due rows (the first of each target), sends them, and deletes each once sent; a row that failed waits
for its next try (``next_at``). A crash between sending and deleting sends that one notification again on restart:
delivery is *at least once*, never lost.

The Kubernetes operator keeps its outbox in a file of its own (:meth:`Outbox.standalone`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.notify.messages import Notification
from orchestrator.spec.notify import NotifyTarget
from orchestrator.state import database

MAX_PENDING_PER_JOB = 200
"""A job that keeps raising events (a flapping watchdog) cannot fill the outbox: beyond this many
waiting notifications, new ones of the job are dropped (and logged by the caller)."""


@dataclass(frozen=True)
class Pending:
    """One notification for one target, waiting in the outbox."""

    id: int
    job_id: str
    target: NotifyTarget
    notification: Notification
    attempts: int
    next_at: datetime


def _ts(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def enqueue(
    conn: sqlite3.Connection,
    backend: str,
    items: Sequence[tuple[NotifyTarget, Notification]],
    now: datetime,
) -> int:
    """Add ``items`` inside the caller's transaction; returns how many were added (see
    :data:`MAX_PENDING_PER_JOB`)."""
    added = 0
    for target, note in items:
        (waiting,) = conn.execute(
            "SELECT COUNT(*) FROM notifications WHERE job_id = ?", (note.job,)
        ).fetchone()
        if waiting >= MAX_PENDING_PER_JOB:
            continue
        conn.execute(
            "INSERT INTO notifications (job_id, backend, target_json, notification_json, created_at, next_at)"
            " VALUES (?,?,?,?,?,?)",
            (note.job, backend, target.model_dump_json(by_alias=True, exclude_none=True),
             json.dumps(note.to_json()), _ts(now), _ts(now)),
        )  # fmt: skip
        added += 1
    return added


class Outbox:
    """The delivery worker's view of one outbox: one SQLite file (connections per thread)."""

    def __init__(self, path: Path, backend: str) -> None:
        self.path = path
        self.backend = backend
        self._connections = database.ThreadConnections(path, read_only=False)

    @classmethod
    def standalone(cls, path: Path, backend: str) -> Outbox:
        """An outbox in a file of its own (created with its table if missing)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        outbox = cls(path, backend)
        with outbox.transaction() as conn:
            for statement in database.OUTBOX_SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
        return outbox

    def _connect(self) -> sqlite3.Connection:
        return self._connections.get()

    def close(self) -> None:
        self._connections.drop()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with database.write_transaction(self._connect(), self.path, self.close) as conn:
            yield conn

    def add(self, items: Sequence[tuple[NotifyTarget, Notification]], now: datetime) -> int:
        """:func:`enqueue` in a transaction of its own (hosts whose state is not in this file)."""
        if not items:
            return 0
        with self.transaction() as conn:
            return enqueue(conn, self.backend, items, now)

    def due(self, now: datetime, limit: int = 50) -> list[Pending]:
        """The first due notification of each target (a target's notifications are sent in order, one
        at a time: the next is due once the first is sent or waits for a retry), oldest first."""
        rows = (
            self._connect()
            .execute(
                "SELECT * FROM notifications AS n WHERE backend = ? AND next_at <= ? AND id = ("
                " SELECT m.id FROM notifications AS m WHERE m.backend = n.backend"
                " AND m.target_json = n.target_json AND m.next_at <= ? ORDER BY m.next_at, m.id LIMIT 1)"
                " ORDER BY next_at, id LIMIT ?",
                (self.backend, _ts(now), _ts(now), limit),
            )
            .fetchall()
        )
        return [
            Pending(
                id=r["id"], job_id=r["job_id"],
                target=NotifyTarget.model_validate_json(r["target_json"]),
                notification=Notification.from_json(json.loads(r["notification_json"])),
                attempts=r["attempts"], next_at=datetime.fromisoformat(r["next_at"]),
            )
            for r in rows
        ]  # fmt: skip

    def next_due(self) -> datetime | None:
        row = (
            self._connect()
            .execute("SELECT MIN(next_at) FROM notifications WHERE backend = ?", (self.backend,))
            .fetchone()
        )
        return datetime.fromisoformat(row[0]) if row and row[0] else None

    def pending(self) -> int:
        row = (
            self._connect()
            .execute("SELECT COUNT(*) FROM notifications WHERE backend = ?", (self.backend,))
            .fetchone()
        )
        return int(row[0])

    def delivered(self, item: Pending) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM notifications WHERE id = ?", (item.id,))

    def retry_at(self, item: Pending, when: datetime, error: str) -> None:
        with self.transaction() as conn:
            conn.execute(
                "UPDATE notifications SET attempts = attempts + 1, next_at = ?, last_error = ? WHERE id = ?",
                (_ts(when), error[:500], item.id),
            )

    def give_up(self, item: Pending, record: Callable[[sqlite3.Connection], None]) -> bool:
        """Remove ``item`` for good and ``record`` the failure in the same transaction (in the job
        store: the ``notify_failed`` event and the removal commit together, so there is exactly one
        event). False when the row was gone already (nothing recorded)."""
        with self.transaction() as conn:
            if conn.execute("DELETE FROM notifications WHERE id = ?", (item.id,)).rowcount == 0:
                return False
            record(conn)
            return True
