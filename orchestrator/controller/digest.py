"""The weekly avoidable-spend digest, scheduled on the controller's APScheduler like the cost reports:
the cost report by team over the digest's span, with every job's fixes (:mod:`orchestrator.costs.avoidable`),
turned into one notification per team (:mod:`orchestrator.notify.digest`) and put in the outbox."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime

from apscheduler.job import Job
from apscheduler.schedulers.base import BaseScheduler

from orchestrator.costs.avoidable import store_fixes
from orchestrator.costs.inputs import read_ledger
from orchestrator.costs.report import GroupBy, Report, build_report_from, parse_since
from orchestrator.costs.schedule import cron_trigger
from orchestrator.notify import NotifyConfig, enqueue
from orchestrator.notify.digest import DigestFix, TeamDigest, digest_notifications
from orchestrator.state.store import JobStore

DIGEST_JOB_ID = "gpuctl-avoidable-digest"


def team_digests(report: Report) -> list[TeamDigest]:
    """One digest per team row of a report by team (filed under the team's largest fix's job, else its
    costliest job)."""
    digests = []
    for row in report.rows:
        jobs = sorted((j for j in report.jobs if j.team == row.name), key=lambda j: -j.cost_usd)
        fixes = tuple(
            DigestFix(f.job_id, f.fix.code, f.fix.fix, f.ranking_usd)
            for f in report.top_fixes
            if f.team == row.name and f.fix.counted  # recommendations are not avoidable spend
        )
        if not jobs:
            continue
        top = next((j for j in jobs if fixes and j.job_id == fixes[0].job), jobs[0])
        digests.append(TeamDigest(row.name, top.job_id, top.user, row.cost_usd, row.avoidable, fixes))
    return digests


def send_digest(store: JobStore, backend: str, config: NotifyConfig, now: datetime | None = None,
                wake: Callable[[], None] | None = None) -> int:  # fmt: skip
    """Build each team's digest now and add it to the outbox; returns how many notifications were added."""
    if config.avoidable_digest is None:
        return 0
    moment = now or datetime.now(UTC)
    fixes, tuned = store_fixes(store, moment)
    inputs = dataclasses.replace(read_ledger(store), fixes=fixes, tuned=tuned)
    report = build_report_from(
        inputs, moment, parse_since(config.avoidable_digest.since, moment), GroupBy.TEAM
    )
    items = digest_notifications(team_digests(report), config, moment)
    with store.transaction() as conn:
        added = enqueue(conn, backend, items, moment)
    if added and wake is not None:
        wake()
    return added


def register_digest_job(scheduler: BaseScheduler, store: JobStore, backend: str, config: NotifyConfig,
                        wake: Callable[[], None] | None = None) -> Job | None:  # fmt: skip
    """Add (or replace) the digest job; ``None`` when the config does not turn the digest on."""
    if config.avoidable_digest is None:
        return None
    return scheduler.add_job(
        send_digest, trigger=cron_trigger(config.avoidable_digest.schedule),
        kwargs={"store": store, "backend": backend, "config": config, "wake": wake},
        id=DIGEST_JOB_ID, name="gpuctl avoidable-spend digest", replace_existing=True, coalesce=True,
        misfire_grace_time=3600,
    )  # fmt: skip
