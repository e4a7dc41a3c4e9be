"""Admission of a GPUJob the operator sees for the first time: the library's :func:`admit`, once.

A GPUJob made with ``kubectl apply`` never met ``gpuctl submit``'s admission, so the operator runs the
same check before the job's first placement (status without a state, or PENDING). A refused job goes
FAILED through the engine (:func:`operators.kubernetes.step.refuse`: its ``failureReason``, message,
a ``Failed`` condition and one Event); FAILED is terminal, so it is never checked again. Its offers are
those of the zones the cluster has (:mod:`operators.kubernetes.zones`): a job allowing none of them is
refused ``no_capacity``, naming them.

Team budgets come from the cost config in ``$GPUCTL_COST_CONFIG`` (the chart's ``budgets``), with the
rule of every backend (:func:`orchestrator.costs.budgets.team_budget`): the GPUJob's ``spec.team``
must be one its namespace may charge (``budgets.namespaceTeams``; without it, only the team named as
the namespace), and a team without its own budget shares ``budgets.otherTeamsMonthlyUsd`` or is
refused. Per-user limits (``budgets.users``) apply to the GPUJob's user, its namespace.

Spend, for every budget and limit, is the cost in the status of the GPUJobs :func:`ledger_gpujobs`
lists: those of every namespace the operator watches (``budgets.spend_namespaces``, which the chart
writes), or of the whole cluster. That function is the one source of spend on Kubernetes, except
with a ledger database (``GPUCTL_DATABASE_URL``): a month's spend, of a team or a user, is then that of
the whole ledger (every backend, namespace and cluster writing to it, deleted GPUJobs included:
:mod:`operators.kubernetes.ledger_db`); running jobs and ``max_jobs`` still count the GPUJobs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from operators.kubernetes.ledger_db import (
    ledger_store,
    ledger_team_month_spent,
    ledger_user_month_spent,
    running_user_month_spent,
)
from operators.kubernetes.zones import cluster_candidates
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.cluster_zones import ClusterZones
from orchestrator.backends.kubernetes.config import COST_CONFIG_ENV, PRICE_CATALOG_ENV
from orchestrator.catalog.offers import read_offers_csv
from orchestrator.controller.admission import Refused, UserSpent, admit
from orchestrator.costs.budgets import (
    CostConfig,
    TeamBudget,
    gpujob_month_spent,
    gpujob_user,
    gpujob_user_standing,
    gpujobs_month_spent,
    gpujobs_running_hourly_usd,
    load_cost_config,
)
from orchestrator.costs.user_limits import UserLimits, UserStanding
from orchestrator.spec import JobSpec
from orchestrator.state.status import JobStatus


def first_sight(status: Mapping[str, Any]) -> bool:
    """The job has not been placed yet: no state written, or PENDING, but not one admitted already
    and waiting for its user's ``max_jobs`` (its ``Waiting`` condition ``UserJobs``), which waits as
    it would on every backend instead of meeting admission again."""
    held = any(
        c.get("type") == "Waiting" and c.get("status") == "True" and c.get("reason") == "UserJobs"
        for c in status.get("conditions") or []
    )
    return status.get("state") in (None, "", str(JobStatus.PENDING)) and not held


def cost_config() -> CostConfig:
    path = os.environ.get(COST_CONFIG_ENV)
    return load_cost_config(path) if path else CostConfig()


def check_settings() -> None:
    """Read the chart's budgets and price catalog once: :class:`UserError` naming the bad field (a
    budget or price that is not a finite amount, 0 or more), so the operator fails at startup."""
    cost_config()
    catalog = os.environ.get(PRICE_CATALOG_ENV)
    if catalog:
        read_offers_csv(catalog, "chart price catalog")


def ledger_gpujobs(config: CostConfig, api: Any | None) -> list[dict[str, Any]]:
    """The GPUJobs whose costs every budget and user limit sums: those of ``budgets.spend_namespaces``
    (the namespaces the chart's operator watches), else of every namespace."""
    if config.spend_namespaces is None:
        return client.list_gpujobs_everywhere(api)
    return [job for ns in config.spend_namespaces for job in client.list_gpujobs(ns, api)]


def month_spent(config: CostConfig, now: datetime, api: Any | None) -> Callable[[TeamBudget], float]:
    """The month spend of a budget: with a ledger database, of every job it counts there (every
    backend, namespace and cluster); else the costs of the GPUJobs it counts (:func:`ledger_gpujobs`)."""
    ledger = ledger_store()

    def spent(budget: TeamBudget) -> float:
        if ledger is not None:
            return ledger_team_month_spent(ledger, budget.counts, now)
        return gpujob_month_spent(ledger_gpujobs(config, api), budget.counts, now)

    return spent


def user_spent(config: CostConfig, now: datetime, api: Any | None) -> UserSpent:
    """Where a user stands at admission: its GPUJobs' month spend and running price (every one of its
    GPUJobs counts as ahead: ``max_jobs`` holds a job when it is placed, not at admission); the month
    spend of the whole ledger with a ledger database."""
    ledger = ledger_store()

    def standing(user: str, limits: UserLimits) -> UserStanding:
        mine = [job for job in ledger_gpujobs(config, api) if gpujob_user(job) == user]
        return UserStanding(
            user,
            limits,
            gpujobs_month_spent(mine, lambda _: True, now)
            if ledger is None
            else ledger_user_month_spent(ledger, user, now),
            gpujobs_running_hourly_usd(mine, lambda _: True),
        )

    return standing


def user_standing(
    spec: JobSpec, body: Mapping[str, Any], now: datetime, api: Any | None
) -> UserStanding | None:
    """Where GPUJob ``body``'s user stands against its limits on this pass; None without limits."""
    config = cost_config()
    limits = config.users.of(spec.user)
    if not limits.any:
        return None
    standing = gpujob_user_standing(ledger_gpujobs(config, api), body, limits, now)
    spent = running_user_month_spent(standing.user, now)  # the whole ledger's, with a ledger database
    return standing if spent is None else replace(standing, month_spent_usd=spent)


def admission_refusal(
    spec: JobSpec,
    namespace: str,
    now: datetime,
    api: Any | None = None,
    cluster: ClusterZones | None = None,
) -> Refused | None:
    """Why the job may not start, or ``None``. API errors propagate (kopf retries the reconcile).
    ``cluster``: the zones the cluster has (:func:`operators.kubernetes.zones.cluster_candidates`: a job
    none of whose allowed zones it has is refused ``no_capacity``, naming them)."""
    config = cost_config()
    decision = admit(
        spec,
        lambda s: cluster_candidates(s, cluster),
        config,
        month_spent(config, now, api),
        namespace,
        user_spent(config, now, api),
    )
    return decision if isinstance(decision, Refused) else None
