"""Where a job's user stands against its limits, on local and SLURM: from the job store.

The controller ticks every job each round; reading every job and this month's segments for each tick
would cost a round time squared in the number of jobs. :class:`UserLedger` reads them once per round
(one ``now``) and again after a tick changed anything (a job started, ended or launched), so that the
next job's tick sees it: two jobs of a user never both take its last slot.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from orchestrator.costs.budgets import CostConfig, month_window, user_standing
from orchestrator.costs.user_limits import UserStanding
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.store import JobStore


@dataclass(frozen=True)
class _Snapshot:
    now: datetime
    jobs: dict[str, list[JobRecord]]
    """User -> its jobs (every state: an ended job's spend counts in its month)."""
    segments: dict[str, list[SegmentRecord]]
    """User -> its jobs' segments of this month and the open ones."""


class UserLedger:
    """Per-user standing from ``store`` for the users ``costs`` limits."""

    def __init__(self, store: JobStore, costs: CostConfig) -> None:
        self.store, self.costs = store, costs
        self._snapshot: _Snapshot | None = None

    def changed(self) -> None:
        """A tick changed a job: the next standing reads the store again."""
        self._snapshot = None

    def standing(self, job: JobRecord, now: datetime) -> UserStanding | None:
        """Where ``job``'s user stands now; None when the user has no limits or the job ended."""
        limits = self.costs.users.of(job.user)
        if not limits.any or job.status.terminal:
            return None
        snap = self._read(now)
        return user_standing(snap.jobs.get(job.user, []), snap.segments.get(job.user, []), job, limits, now)

    def _read(self, now: datetime) -> _Snapshot:
        if self._snapshot is not None and self._snapshot.now == now:
            return self._snapshot
        jobs: dict[str, list[JobRecord]] = defaultdict(list)
        owner: dict[str, str] = {}
        for record in self.store.list_jobs():
            jobs[record.user].append(record)
            owner[record.id] = record.user
        segments: dict[str, list[SegmentRecord]] = defaultdict(list)
        for seg in self.store.segments(since=month_window(now).start):
            if seg.job_id in owner:
                segments[owner[seg.job_id]].append(seg)
        self._snapshot = _Snapshot(now, dict(jobs), dict(segments))
        return self._snapshot
