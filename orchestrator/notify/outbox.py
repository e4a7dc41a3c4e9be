"""The outbox: notifications waiting to be delivered, in the database, so that a crash loses none.

The local and SLURM controllers keep it in the job store (table ``notifications``) and write a tick's
notifications in the tick's own transaction (:func:`enqueue`): they exist exactly when the state
change that made them was committed. The delivery worker (:mod:`orchestrator.notify.worker`) takes
due rows (the first of each target), *claims* each before sending it, and deletes each once sent; a row
that failed waits for its next try (``next_at``).

Several controllers may share one database, each with its own worker. A claim (:meth:`Outbox.claim`) is
one conditional update, taken by exactly one worker: ``claimed_by`` / ``claimed_until`` set only where
the row is due, unclaimed (or its claim has passed) and still at the try the worker read. So each try of
a notification is sent by one controller, and while a row is claimed no other row of its target is
due (a target's notifications go out in order). A claim lasts longer than one delivery may take
(:data:`CLAIM_MARGIN_S` beyond the sender's deadline): a worker killed mid-send leaves a claim that
passes, and another worker sends that notification then. Delivery is never lost; it is repeated only
when a worker died between sending and deleting the row.

The Kubernetes operator keeps its outbox in a file of its own (:meth:`Outbox.standalone`).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Connection, bindparam, delete, exists, func, insert, inspect, or_, select, update

from orchestrator.notify.messages import Notification
from orchestrator.spec.notify import NotifyTarget
from orchestrator.state import database
from orchestrator.state.database_url import sqlite_url
from orchestrator.state.prepared import Prepared
from orchestrator.state.tables import notifications

_N = notifications.c
_WAITING = Prepared(select(func.count()).select_from(notifications).where(_N.job_id == bindparam("job")))
_ADD = Prepared(insert(notifications))
_FIRST = notifications.alias("m")
_HELD = notifications.alias("c")
_DUE = (
    select(notifications)
    .where(
        _N.backend == bindparam("backend"), _N.next_at <= bindparam("now"),
        _N.id == select(_FIRST.c.id).where(
            _FIRST.c.backend == _N.backend, _FIRST.c.target_json == _N.target_json,
            _FIRST.c.next_at <= bindparam("now"),
        ).order_by(_FIRST.c.next_at, _FIRST.c.id).limit(1).scalar_subquery(),
        ~exists().where(
            _HELD.c.backend == _N.backend, _HELD.c.target_json == _N.target_json,
            _HELD.c.claimed_until > bindparam("now"),
        ),
    )
    .order_by(_N.next_at, _N.id)
    .limit(bindparam("limit"))
)  # fmt: skip
_NEXT_DUE = select(func.min(_N.next_at)).where(_N.backend == bindparam("backend"))
_PENDING = select(func.count()).select_from(notifications).where(_N.backend == bindparam("backend"))
_DELETE = delete(notifications).where(_N.id == bindparam("b_id"))
_MINE = (_N.id == bindparam("b_id"), _N.claimed_by == bindparam("holder"))
_GIVE_UP = delete(notifications).where(*_MINE)
_RETRY = (
    update(notifications)
    .where(*_MINE)
    .values(attempts=_N.attempts + 1, next_at=bindparam("next_at"), last_error=bindparam("last_error"),
            claimed_by=None, claimed_until=None)
)  # fmt: skip
_CLAIM = (
    update(notifications)
    .where(
        _N.id == bindparam("b_id"), _N.attempts == bindparam("b_attempts"), _N.next_at <= bindparam("now"),
        or_(_N.claimed_until.is_(None), _N.claimed_until <= bindparam("now")),
    )
    .values(claimed_by=bindparam("holder"), claimed_until=bindparam("until"))
)  # fmt: skip

_CLAIM_COLUMNS = ("claimed_by", "claimed_until")
CLAIM_MARGIN_S = 60.0
"""A claim lasts this much longer than the sender's deadline for one delivery: time to write the
outcome, and room for the controllers' clocks to differ."""

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
    conn: Connection,
    backend: str,
    items: Sequence[tuple[NotifyTarget, Notification]],
    now: datetime,
) -> int:
    """Add ``items`` inside the caller's transaction; returns how many were added (see
    :data:`MAX_PENDING_PER_JOB`)."""
    added = 0
    for target, note in items:
        if int(_WAITING.scalar(conn, {"job": note.job})) >= MAX_PENDING_PER_JOB:
            continue
        _ADD.run(conn, {
            "job_id": note.job, "backend": backend,
            "target_json": target.model_dump_json(by_alias=True, exclude_none=True),
            "notification_json": json.dumps(note.to_json()), "created_at": _ts(now), "next_at": _ts(now),
        })  # fmt: skip
        added += 1
    return added


class Outbox:
    """The delivery worker's view of one outbox: the job store's database (``location``: its URL), or
    a SQLite file of its own (a path)."""

    def __init__(self, location: str | Path, backend: str, holder: str | None = None) -> None:
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        """Who this outbox's claims name (one per delivery worker)."""
        self.url = sqlite_url(location) if isinstance(location, Path) else location
        self.path = database.where(self.url)
        self.backend = backend
        self.engine = database.engine_for(self.url)
        self.connections = database.Connections(self.engine, self.url, self.path)

    @classmethod
    def standalone(cls, path: Path, backend: str) -> Outbox:
        """An outbox in a file of its own (created with its table if missing; a table written by an
        earlier gpuctl gets the columns it lacks)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        outbox = cls(path, backend)
        with outbox.transaction() as conn:
            notifications.create(conn, checkfirst=True)
            found = {c["name"] for c in inspect(conn).get_columns(notifications.name)}
            for column in _CLAIM_COLUMNS:
                if column not in found:
                    conn.exec_driver_sql(f"ALTER TABLE {notifications.name} ADD COLUMN {column} TEXT")
        return outbox

    def close(self) -> None:
        """Close the pooled connections (the next use opens fresh ones)."""
        self.engine.dispose()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.connections.transaction() as conn:
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
        rows = self.connections.read(_DUE, {"backend": self.backend, "now": _ts(now), "limit": limit})
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
        rows = self.connections.read(_NEXT_DUE, {"backend": self.backend})
        found = next(iter(rows[0].values())) if rows else None
        return datetime.fromisoformat(found) if found else None

    def pending(self) -> int:
        rows = self.connections.read(_PENDING, {"backend": self.backend})
        return int(next(iter(rows[0].values())))

    def claim(self, item: Pending, now: datetime, until: datetime) -> bool:
        """Take ``item``'s current try for this outbox's :attr:`holder` until ``until``: True for exactly
        one of any number of workers asking at once (False: sent, claimed, retried or gone meanwhile)."""
        with self.transaction() as conn:
            found = conn.execute(_CLAIM, {"b_id": item.id, "b_attempts": item.attempts, "now": _ts(now),
                                          "holder": self.holder, "until": _ts(until)})  # fmt: skip
            return found.rowcount == 1

    def delivered(self, item: Pending) -> None:
        with self.transaction() as conn:
            conn.execute(_DELETE, {"b_id": item.id})

    def retry_at(self, item: Pending, when: datetime, error: str) -> None:
        """Set ``item``'s next try (and release the claim); nothing where the claim is no longer ours."""
        with self.transaction() as conn:
            conn.execute(_RETRY, {"b_id": item.id, "holder": self.holder, "next_at": _ts(when),
                                  "last_error": error[:500]})  # fmt: skip

    def give_up(self, item: Pending, record: Callable[[Connection], None]) -> bool:
        """Remove ``item`` for good and ``record`` the failure in the same transaction (in the job
        store: the ``notify_failed`` event and the removal commit together, so there is exactly one
        event). False when the row was gone already or claimed by another worker (nothing recorded)."""
        with self.transaction() as conn:
            if conn.execute(_GIVE_UP, {"b_id": item.id, "holder": self.holder}).rowcount == 0:
                return False
            record(conn)
            return True
