"""Per-job leases: which controller ticks each job when several controllers share one database.

A controller (one process, :func:`new_holder`: ``host:pid:random``) ticks a job only while it holds the
job's lease, a row of ``job_leases``: ``holder``, ``expires_at`` and ``generation``. Every time is the
*database's* clock (:class:`db_epoch`: PostgreSQL's ``clock_timestamp()``, SQLite's ``julianday('now')``),
so the clocks of the machines the controllers run on never matter.

* :meth:`JobLeases.take` takes the leases that are free or expired and renews those it holds, for a
  whole round of jobs in one transaction (the rows locked in job id order first, so two controllers
  taking overlapping sets never deadlock); a lease that changes hands gets ``generation + 1``.
* :meth:`JobLeases.fence` runs first in every write transaction of a tick: the lease must still be the
  controller's, of the generation it took, and unexpired, or :class:`LeaseLost` rolls the transaction
  back. On PostgreSQL the check locks the lease's row until the commit, so a takeover waits for the
  write and a write never lands after a takeover. On SQLite ``BEGIN IMMEDIATE`` serialises the same.
  A write that is one statement (a running job's tick on PostgreSQL) carries the fence in itself
  (:func:`fence_cte`): no transaction around it, the same guarantee.
* :meth:`JobLeases.release` hands a stopping controller's leases back at once (expired now).
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import CTE, Connection, Float, and_, bindparam, case, cast, literal, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from orchestrator.errors import TemporaryError
from orchestrator.state.prepared import Prepared
from orchestrator.state.tables import job_leases

__all__ = [
    "LEASE_S", "Fence", "JobLeases", "LeaseLost", "db_epoch", "fence_cte", "lease_holder", "live_holders",
    "new_holder",
]  # fmt: skip

LEASE_S = 5.0
"""A lease's length by default: five ticks of one second. A controller killed with -9 is replaced
within this long plus one tick."""
CHUNK = 500
"""Job ids per statement (SQLite allows 32766 parameters; PostgreSQL 65535)."""


class db_epoch(FunctionElement[float]):
    """The database's clock, in seconds since the epoch (a float on both engines)."""

    type = Float()
    inherit_cache = True


@compiles(db_epoch, "postgresql")
def _postgres_epoch(element: db_epoch, compiler: SQLCompiler, **kw: Any) -> str:
    # clock_timestamp(), not now(): the time of this statement, not of the transaction's start
    return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"


@compiles(db_epoch, "sqlite")
def _sqlite_epoch(element: db_epoch, compiler: SQLCompiler, **kw: Any) -> str:
    return "((julianday('now') - 2440587.5) * 86400.0)"


class LeaseLost(TemporaryError):
    """This controller no longer holds the job's lease: another took it over (or it expired while this
    controller stalled). Nothing of the tick was written; the job is the new holder's."""

    def __init__(self, job_id: str) -> None:
        super().__init__(
            f"job {job_id}: this controller's lease on it expired or was taken over by another controller",
            "nothing to do: the controller holding the lease ticks the job",
        )
        self.job_id = job_id


class Transactions(Protocol):
    """Where leases are written: a job store (its write transactions)."""

    def transaction(self) -> Any: ...


def new_holder() -> str:
    """This controller's name in the leases it holds: ``host:pid:random`` (unique per process)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


_FENCE_UPDATE = (
    update(job_leases)
    .where(
        and_(
            job_leases.c.job_id == bindparam("b_job_id"),
            job_leases.c.holder == bindparam("b_holder"),
            job_leases.c.generation == bindparam("b_generation"),
            job_leases.c.expires_at >= db_epoch(),
        )
    )
    .values(expires_at=db_epoch() + cast(bindparam("lease_s"), Float))
)
_FENCE = Prepared(_FENCE_UPDATE)
"""The fence of every write transaction (:meth:`JobLeases.fence`), run on the driver directly: a
tick's statement, compiled once (:mod:`orchestrator.state.prepared`)."""


def fence_cte() -> CTE:
    """The fence as a data-modifying ``WITH`` (PostgreSQL): ``fence.job_id`` is the job's id when
    the lease is still the holder's, of its generation and unexpired (and is then extended), no row
    otherwise. A write that selects its row through it (``WHERE id IN (SELECT job_id FROM fence)``)
    is one statement, so one transaction: it writes only while the lease holds, and its lock on the
    lease's row lasts until that write commits, as :meth:`JobLeases.fence` does in a transaction.
    Its parameters: :meth:`Fence.params`."""
    return _FENCE_UPDATE.returning(job_leases.c.job_id).cte("fence")


@dataclass(frozen=True)
class Fence:
    """What a fenced write checks: ``holder`` holds ``job_id``'s lease of ``generation``, unexpired
    (extended by ``lease_s`` when it does)."""

    job_id: str
    holder: str
    generation: int
    lease_s: float

    def params(self) -> dict[str, Any]:
        """The parameters of :data:`_FENCE` and :func:`fence_cte`."""
        return {
            "b_job_id": self.job_id,
            "b_holder": self.holder,
            "b_generation": self.generation,
            "lease_s": self.lease_s,
        }


def _chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    ordered = sorted(set(ids))
    for start in range(0, len(ordered), CHUNK):
        yield ordered[start : start + CHUNK]


class JobLeases:
    """The leases one controller (``holder``) takes, renews, checks and releases in ``store``'s database."""

    def __init__(self, store: Transactions, holder: str | None = None, lease_s: float = LEASE_S) -> None:
        self.store = store
        self.holder = holder or new_holder()
        self.lease_s = lease_s

    def take(self, job_ids: Sequence[str]) -> dict[str, int]:
        """Take the leases of ``job_ids`` that are free or expired, renew those this controller holds;
        returns job id -> generation of every lease held now (for ``lease_s`` from now)."""
        held: dict[str, int] = {}
        if not job_ids:
            return held
        with self.store.transaction() as conn:
            for chunk in _chunks(job_ids):
                held.update(self._take_chunk(conn, chunk))
        return held

    def _take_chunk(self, conn: Connection, ids: list[str]) -> dict[str, int]:
        t = job_leases
        locked = select(t.c.job_id).where(t.c.job_id.in_(ids)).order_by(t.c.job_id).with_for_update()
        existing = set(conn.execute(locked).scalars())
        missing = [i for i in ids if i not in existing]
        if missing:
            insert = pg_insert(t) if conn.dialect.name == "postgresql" else sqlite_insert(t)
            rows = [{"job_id": i, "holder": "", "expires_at": 0.0, "generation": 0} for i in missing]
            conn.execute(insert.on_conflict_do_nothing(index_elements=["job_id"]), rows)
        ours = t.c.holder == self.holder
        taken = (
            update(t)
            .where(t.c.job_id.in_(ids), or_(ours, t.c.expires_at < db_epoch()))
            .values(
                holder=self.holder,
                generation=case((ours, t.c.generation), else_=t.c.generation + 1),
                expires_at=db_epoch() + literal(self.lease_s),
            )
            .returning(t.c.job_id, t.c.generation)
        )
        return {row.job_id: row.generation for row in conn.execute(taken)}

    def fence(self, conn: Connection, job_id: str, generation: int) -> None:
        """In a write transaction (first): raise :class:`LeaseLost` unless this controller still holds
        ``job_id``'s lease of ``generation``, unexpired; extend it by ``lease_s`` when it does."""
        if _FENCE.run(conn, self.fence_of(job_id, generation).params()) != 1:
            raise LeaseLost(job_id)

    def fence_of(self, job_id: str, generation: int) -> Fence:
        """What a write of ``job_id`` checks when this controller holds its lease of ``generation``."""
        return Fence(job_id, self.holder, generation, self.lease_s)

    def release(self) -> None:
        """Hand back every lease this controller holds (a controller stopping): they expire now."""
        with self.store.transaction() as conn:
            conn.execute(update(job_leases).where(job_leases.c.holder == self.holder).values(expires_at=0.0))


def live_holders(conn: Connection, job_ids: Sequence[str]) -> dict[str, str]:
    """Job id -> the controller (``host:pid:random``) holding its lease now, for the jobs that have one."""
    t = job_leases
    found: dict[str, str] = {}
    for chunk in _chunks(job_ids):
        rows = conn.execute(
            select(t.c.job_id, t.c.holder).where(t.c.job_id.in_(chunk), t.c.expires_at >= db_epoch())
        )
        found.update({row.job_id: row.holder for row in rows})
    return found


class Reads(Protocol):
    """Where leases are read: a job store's connections."""

    def read(self, statement: Any, params: Any = None) -> list[Any]: ...


def lease_holder(connections: Reads, job_id: str) -> str | None:
    """The controller (``host:pid:random``) holding ``job_id``'s lease now; None when none does."""
    t = job_leases
    rows = connections.read(select(t.c.holder).where(t.c.job_id == job_id, t.c.expires_at >= db_epoch()))
    return str(rows[0]["holder"]) if rows else None
