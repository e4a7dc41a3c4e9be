"""Admission of a GPUJob the operator sees for the first time: the library's :func:`admit`, once.

A GPUJob made with ``kubectl apply`` never met ``gpuctl submit``'s admission, so the operator runs the
same check before the job's first placement (status without a state, or PENDING). A refused job goes
FAILED through the engine (:func:`operators.kubernetes.step.refuse`: its ``failureReason``, message,
a ``Failed`` condition and one Event); FAILED is terminal, so it is never checked again.

Team budgets come from the cost config in ``$GPUCTL_COST_CONFIG`` (the chart's ``budgets``), with the
rule of every backend (:func:`orchestrator.costs.budgets.team_budget`): the GPUJob's ``spec.team``
must be one its namespace may charge (``budgets.namespaceTeams``), and a team without its own budget
shares ``budgets.otherTeamsMonthlyUsd`` or is refused. A budget's month spend is the cost in the
status of the GPUJobs it counts, in the job's namespace and every namespace ``namespaceTeams`` lets
charge it (the chart allows only watched namespaces there, where the operator's Roles list GPUJobs).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.config import COST_CONFIG_ENV, PRICE_CATALOG_ENV
from orchestrator.catalog.offers import read_offers_csv
from orchestrator.controller.admission import Refused, admit
from orchestrator.controller.placement import catalog_candidates
from orchestrator.costs.budgets import CostConfig, TeamBudget, gpujob_month_spent, load_cost_config
from orchestrator.spec import JobSpec
from orchestrator.state.status import JobStatus


def first_sight(status: Mapping[str, Any]) -> bool:
    """The job has not been placed yet: no state written, or PENDING."""
    return status.get("state") in (None, "", str(JobStatus.PENDING))


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


def month_spent(
    config: CostConfig, namespace: str, now: datetime, api: Any | None
) -> Callable[[TeamBudget], float]:
    """The month spend of a budget: the costs of the GPUJobs it counts, in ``namespace`` and in each
    namespace that ``budgets.namespace_teams`` lets charge it."""

    def spent(budget: TeamBudget) -> float:
        namespaces = dict.fromkeys((namespace, *config.namespaces_charging(budget)))
        jobs = [job for ns in namespaces for job in client.list_gpujobs(ns, api)]
        return gpujob_month_spent(jobs, budget.counts, now)

    return spent


def admission_refusal(spec: JobSpec, namespace: str, now: datetime, api: Any | None = None) -> Refused | None:
    """Why the job may not start, or ``None``. API errors propagate (kopf retries the reconcile)."""
    config = cost_config()
    catalog = os.environ.get(PRICE_CATALOG_ENV)
    decision = admit(
        spec,
        lambda s: catalog_candidates(s, catalog),
        config,
        month_spent(config, namespace, now, api),
        namespace,
    )
    return decision if isinstance(decision, Refused) else None
