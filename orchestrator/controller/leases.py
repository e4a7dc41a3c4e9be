"""Which jobs this controller may tick: the leases it holds (:mod:`orchestrator.state.leases`), kept
fresh between and within rounds.

Several ``gpuctl controller run`` may share one database (PostgreSQL: several login nodes, several
users). Each round, :meth:`LeaseKeeper.take_round` takes or renews the leases of every job the round
looks at, in one transaction, and the controller ticks only the jobs it holds. A long round renews
again before a job whose lease is past half its time (:meth:`LeaseKeeper.ensure`), and while one tick
runs (:meth:`LeaseKeeper.ticking`: a backend call may outlast the lease, e.g. a launch waiting for its
rendezvous store to start) a thread of the keeper (:meth:`LeaseKeeper.start`) renews that job's lease
every quarter of its time, so a lease never runs out while its holder is alive and ticking: no other
controller takes a job over, and launches it again, in the middle of its holder's launch. Every write transaction of a tick starts with
:meth:`LeaseKeeper.fence`: a controller that stalled past its lease (a stopped process, a long GC, a
partition) and lost the job writes nothing, and launches nothing (the driver fences before it hands
intents to the backend); a write that is one statement carries the fence in itself
(:meth:`LeaseKeeper.fence_of`). A job's lease is lost without a word to the user: the new holder ticks it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection

from orchestrator.errors import GpuctlError
from orchestrator.state.leases import LEASE_S, Fence, JobLeases, LeaseLost, Transactions

log = logging.getLogger(__name__)

__all__ = ["LeaseKeeper", "LeaseLost"]


@dataclass
class _Held:
    generation: int
    renewed: float
    """``time.monotonic()`` just before the statement that took or renewed it."""


class LeaseKeeper:
    """The leases of one controller process; ``lease_s``: how long each lasts unless renewed."""

    def __init__(self, store: Transactions, lease_s: float = LEASE_S, holder: str | None = None) -> None:
        self.leases = JobLeases(store, holder, lease_s)
        self.held: dict[str, _Held] = {}
        self._ticking: str | None = None
        """The job whose tick runs now (:meth:`ticking`): its lease is kept by :meth:`_keep`."""
        self._closed = threading.Event()
        self._keeper: threading.Thread | None = None

    @property
    def holder(self) -> str:
        return self.leases.holder

    def take_round(self, job_ids: Sequence[str]) -> set[str]:
        """Take or renew the leases of ``job_ids`` (one transaction); the ones held now. A job lost to
        another controller is dropped from :attr:`held`."""
        started = time.monotonic()
        taken = self.leases.take(job_ids)
        for job_id in job_ids:
            if job_id in taken:
                self.held[job_id] = _Held(taken[job_id], started)
            elif self.held.pop(job_id, None) is not None:
                log.info("job %s: now ticked by another controller", job_id)
        return set(taken)

    def ensure(self, job_id: str) -> bool:
        """Whether this controller holds ``job_id``'s lease for at least half its time from now
        (renewed, or taken when free, if needed)."""
        return not self.stale(job_id) or job_id in self.take_round([job_id])

    def stale(self, job_id: str) -> bool:
        """Whether ``job_id``'s lease is not held, or held for more than half its time since renewed."""
        held = self.held.get(job_id)
        return held is None or time.monotonic() - held.renewed >= self.leases.lease_s / 2

    def fence(self, conn: Connection, job_id: str) -> None:
        """First in a tick's write transaction: :class:`LeaseLost` unless the lease is still ours."""
        held = self.held.get(job_id)
        if held is None:
            raise LeaseLost(job_id)
        self.leases.fence(conn, job_id, held.generation)

    def fence_of(self, job_id: str) -> Fence:
        """What a write of ``job_id`` that is one statement checks (:func:`~orchestrator.state.leases.fence_cte`):
        :class:`LeaseLost` at once when this controller does not hold the lease."""
        held = self.held.get(job_id)
        if held is None:
            raise LeaseLost(job_id)
        return self.leases.fence_of(job_id, held.generation)

    def generation(self, job_id: str) -> int | None:
        """The generation of ``job_id``'s lease as this controller holds it (None: not held)."""
        held = self.held.get(job_id)
        return None if held is None else held.generation

    def lost(self, job_id: str) -> None:
        self.held.pop(job_id, None)

    def release(self) -> None:
        """Hand every lease back (a controller stopping): another controller takes them at once."""
        self.stop()
        self.held.clear()
        self.leases.release()

    @contextmanager
    def ticking(self, job_id: str) -> Iterator[None]:
        """While the block (one tick of ``job_id``) runs, the keeper thread renews its lease."""
        self._ticking = job_id
        try:
            yield
        finally:
            self._ticking = None

    def start(self) -> None:
        """Start the thread that keeps the lease of the job being ticked (:meth:`ticking`)."""
        if self._keeper is None:
            self._closed.clear()
            self._keeper = threading.Thread(target=self._keep, name="gpuctl-lease-keeper", daemon=True)
            self._keeper.start()

    def stop(self) -> None:
        if self._keeper is not None:
            self._closed.set()
            self._keeper.join()
            self._keeper = None

    def _keep(self) -> None:
        period = max(self.leases.lease_s / 4, 0.05)
        while not self._closed.wait(period):
            job_id = self._ticking
            held = self.held.get(job_id) if job_id is not None else None
            if job_id is not None and held is not None and time.monotonic() - held.renewed >= period:
                self._renew(job_id, held)

    def _renew(self, job_id: str, held: _Held) -> None:
        """Extend ``held`` (unless it was lost: then the tick's next write finds it lost too)."""
        started = time.monotonic()
        try:
            with self.leases.store.transaction() as conn:
                self.leases.fence(conn, job_id, held.generation)
        except LeaseLost:
            return
        except GpuctlError as exc:  # the database is busy or down: the tick's own writes say so
            log.warning("job %s: could not renew its lease during a long tick: %s", job_id, exc.message)
            return
        if self.held.get(job_id) is held:
            self.held[job_id] = _Held(held.generation, started)
