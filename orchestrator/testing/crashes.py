"""Controller deaths injected at chosen write→effect boundaries, instead of kill -9 at random times.

Every place where the controller writes state and then acts (or acts and then writes) is a
*boundary*; the wrappers here count them as the controller passes them and raise
:class:`ControllerCrash` at the ones a :class:`CrashPlan` names. ``ControllerCrash`` derives from
``BaseException``, so no ``except Exception`` in the controller can swallow it: the "process" is dead,
what it committed is on disk, what it had not committed is rolled back, and a test starts a new
controller on the same store and world, as a supervisor would.

    plan = CrashPlan(gaps=(3, 5, 7, 11))
    store = CrashingStore(home, plan)            # boundaries: before and after each commit
    backend = CrashingBackend(SimulatedBackend(), plan)  # before and after each launch and stop
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from orchestrator.backends.base import AttemptObservation, Backend, LaunchRequest, OwnPlacements
from orchestrator.spec import JobSpec
from orchestrator.state.store import JobStore


class ControllerCrash(BaseException):
    """The controller process died here (injected)."""


class CrashPlan:
    """Where to crash: at boundary numbers ``at``, and from ``first`` on, again after each gap of
    ``gaps`` in turn (cycled). Gaps that vary keep crashes from falling on the same step of every
    tick, which a fixed period can do (a tick that passes a multiple of it boundaries would never end).
    """

    def __init__(self, at: Sequence[int] = (), gaps: Sequence[int] = (), first: int = 0) -> None:
        self.at = set(at)
        self.gaps = tuple(gaps)
        self._next = first if self.gaps else None
        self._gap_index = 0
        self.passed = 0
        self.crashes: Counter[str] = Counter()
        """Boundary kind -> crashes injected there."""
        self.seen: Counter[str] = Counter()
        """Boundary kind -> times passed."""
        self.enabled = True

    def boundary(self, kind: str) -> None:
        if not self.enabled:
            return
        number = self.passed
        self.passed += 1
        self.seen[kind] += 1
        due = number in self.at
        if self._next is not None and number == self._next:
            due = True
            self._next += self.gaps[self._gap_index % len(self.gaps)]
            self._gap_index += 1
        if due:
            self.crashes[kind] += 1
            raise ControllerCrash(
                f"injected crash #{sum(self.crashes.values())} at {kind} (boundary {number})"
            )


class CrashingStore(JobStore):
    """A job store whose transactions can die just before or just after they commit."""

    def __init__(self, home: Path, plan: CrashPlan) -> None:
        super().__init__(home)
        self.plan = plan

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with super().transaction() as conn:
            yield conn
            self.plan.boundary("before commit")  # raising here rolls the transaction back
        self.plan.boundary("after commit")


class CrashingBackend:
    """Wraps a backend: the controller can die just before or just after each launch and stop."""

    def __init__(self, inner: Backend, plan: CrashPlan) -> None:
        self.inner = inner
        self.plan = plan
        self.name = inner.name

    def launch(self, request: LaunchRequest) -> None:
        self.plan.boundary("before launch")
        self.inner.launch(request)
        self.plan.boundary("after launch")

    def stop(self, job_id: str, attempt: int, node_ids: Sequence[str], grace_s: float) -> None:
        self.plan.boundary("before stop")
        self.inner.stop(job_id, attempt, node_ids, grace_s)
        self.plan.boundary("after stop")

    def observe(self, job_id: str, attempt: int, node_ids: Sequence[str]) -> AttemptObservation:
        return self.inner.observe(job_id, attempt, node_ids)

    def own_placements(self, spec: JobSpec) -> OwnPlacements | None:
        return self.inner.own_placements(spec)

    def spot_capacity(self, job_id: str, zone: str, now: datetime) -> int | None:
        return self.inner.spot_capacity(job_id, zone, now)

    def tick(self, *args: Any) -> None:
        self.inner.tick(*args)

    def log_paths(self, job_id: str) -> list[Path]:
        return self.inner.log_paths(job_id)
