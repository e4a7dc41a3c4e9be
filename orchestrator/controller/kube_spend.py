"""What team budgets and user limits count on Kubernetes: one source of spend for the operator
(:mod:`operators.kubernetes.admission`: at admission and on every pass of a running job) and for
``gpuctl submit --backend kubernetes`` (its check before the GPUJob is created).

:class:`KubeSpend` holds the two sources:

- ``gpujobs``: the GPUJobs the caller can list (the operator: every namespace it watches; the CLI: the
  job's namespace). Each keeps its segments in its status, so they are the live truth of this cluster;
- ``ledger``: the ledger database, when one is configured (``GPUCTL_DATABASE_URL`` /
  ``database.url``): the ``jobs`` and ``segments`` rows of every backend, namespace and cluster that
  writes to it (the operators record their GPUJobs there keyed by uid:
  :mod:`orchestrator.state.external_jobs`), deleted GPUJobs included.

With a ledger, a month's spend (a team's or a user's) is the whole ledger's. A user's running jobs
(its hourly price and its ``max_jobs`` slots) are its listed GPUJobs plus its ledger jobs that are
not among them (other clusters, namespaces not listed, SLURM and local jobs): a GPUJob is counted once,
from its live status. Without a ledger, every sum reads the listed GPUJobs only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from orchestrator.costs.budgets import (
    TeamBudget,
    TeamMatch,
    gpujob_month_spent,
    gpujob_user,
    gpujob_user_standing,
    gpujobs_month_spent,
    gpujobs_running_hourly_usd,
    month_spent,
    month_window,
    running_hourly_usd,
    team_month_spent,
)
from orchestrator.costs.user_limits import UserLimits, UserStanding
from orchestrator.errors import GpuctlError
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.times import parse_iso_or_none

log = logging.getLogger(__name__)

GpuJobs = Callable[[], Sequence[Mapping[str, Any]]]
"""The GPUJobs the spend is summed over, listed when first needed."""


def gpujob_ledger_id(body: Mapping[str, Any]) -> str:
    """The id of GPUJob ``body``'s row in the ledger: its uid (``NAMESPACE/NAME`` without one)."""
    meta = body.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}")


def ledger_team_month_spent(store: JobStore, team: TeamMatch, now: datetime) -> float:
    """What ``team`` spent in the month of ``now`` over the whole ledger: every backend, namespace and
    cluster that writes to it, deleted GPUJobs included."""
    return team_month_spent(store.list_jobs(), store.segments(since=month_window(now).start), team, now)


def ledger_user_month_spent(store: JobStore, user: str, now: datetime) -> float:
    """What ``user``'s jobs spent in the month of ``now`` over the whole ledger."""
    jobs, segments = _user_rows(store, user, now)
    return month_spent(jobs, segments, lambda _: True, now)


def _user_rows(store: JobStore, user: str, now: datetime) -> tuple[list[JobRecord], list[SegmentRecord]]:
    """``user``'s ledger jobs, and their segments of the month of ``now`` and the open ones."""
    jobs = [j for j in store.list_jobs() if j.user == user]
    ids = {j.id for j in jobs}
    return jobs, [s for s in store.segments(since=month_window(now).start) if s.job_id in ids]


@dataclass(frozen=True)
class _Elsewhere:
    """A user's ledger rows: the month spend of all, and the jobs not among the listed GPUJobs."""

    month_spent_usd: float
    jobs: list[JobRecord]
    segments: list[SegmentRecord]

    @property
    def hourly_usd(self) -> float:
        return running_hourly_usd(self.jobs, self.segments, lambda _: True)

    def ahead_of(self, submitted: datetime) -> int:
        """The jobs that hold a slot (started, not ended), or wait and were submitted before ``submitted``."""
        return sum(
            1
            for j in self.jobs
            if not j.status.terminal and (j.status is not JobStatus.PENDING or j.submitted_at < submitted)
        )


@dataclass(frozen=True)
class KubeSpend:
    """The sources of spend on Kubernetes (see the module)."""

    gpujobs: GpuJobs
    ledger: JobStore | None = None

    def team_spent(self, budget: TeamBudget, now: datetime) -> float:
        """What the teams ``budget`` counts spent in the month of ``now``."""
        if self.ledger is not None:
            return ledger_team_month_spent(self.ledger, budget.counts, now)
        return gpujob_month_spent(self.gpujobs(), budget.counts, now)

    def _elsewhere(
        self, store: JobStore, user: str, listed: Sequence[Mapping[str, Any]], now: datetime
    ) -> _Elsewhere:
        jobs, segments = _user_rows(store, user, now)
        counted = {gpujob_ledger_id(obj) for obj in listed}
        others = [j for j in jobs if j.id not in counted]
        ids = {j.id for j in others}
        return _Elsewhere(
            month_spent(jobs, segments, lambda _: True, now), others, [s for s in segments if s.job_id in ids]
        )

    def admission_standing(self, user: str, limits: UserLimits, now: datetime) -> UserStanding:
        """Where ``user`` stands for a job not created yet: its month spend and its running jobs'
        hourly price (``max_jobs`` holds a job when it is placed, not at admission). Ledger errors
        propagate."""
        mine = [obj for obj in self.gpujobs() if gpujob_user(obj) == user]
        hourly = gpujobs_running_hourly_usd(mine, lambda _: True)
        if self.ledger is None:
            return UserStanding(user, limits, gpujobs_month_spent(mine, lambda _: True, now), hourly)
        rows = self._elsewhere(self.ledger, user, mine, now)
        return UserStanding(user, limits, rows.month_spent_usd, hourly + rows.hourly_usd)

    def running_standing(self, body: Mapping[str, Any], limits: UserLimits, now: datetime) -> UserStanding:
        """Where GPUJob ``body``'s user stands on a pass of it. A ledger that cannot be read is logged
        and the listed GPUJobs stand in (a running job's pass never waits on the database)."""
        listed = self.gpujobs()
        standing = gpujob_user_standing(listed, body, limits, now)
        if self.ledger is None:
            return standing
        mine = [obj for obj in listed if gpujob_user(obj) == standing.user]
        try:
            rows = self._elsewhere(self.ledger, standing.user, [*mine, body], now)
        except GpuctlError as err:
            log.warning(
                "user %s's standing from the GPUJobs: the ledger database cannot be read (%s)",
                standing.user,
                err.what,
            )
            return standing
        created = parse_iso_or_none(str((body.get("metadata") or {}).get("creationTimestamp") or ""))
        return replace(
            standing,
            month_spent_usd=rows.month_spent_usd,
            others_hourly_usd=standing.others_hourly_usd + rows.hourly_usd,
            ahead=standing.ahead + rows.ahead_of(created or now),
        )
