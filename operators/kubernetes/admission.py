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

Spend, for every budget and limit, is summed by :class:`orchestrator.controller.kube_spend.KubeSpend`
(the sums ``gpuctl submit --backend kubernetes`` checks too) over the GPUJobs :func:`ledger_gpujobs`
lists (those of every namespace the operator watches, ``budgets.spend_namespaces``, which the chart
writes, or of the whole cluster) and, with a ledger database (``GPUCTL_DATABASE_URL``), the ledger: a
month's spend, of a team or a user, is then that of the whole ledger (every backend, namespace and
cluster writing to it, deleted GPUJobs included: :mod:`operators.kubernetes.ledger_db`), and a user's
running jobs (its hourly cap, its ``max_jobs``) are its GPUJobs here plus its unfinished jobs on other
clusters and backends.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from operators.kubernetes.ledger_db import ledger_store
from operators.kubernetes.zones import cluster_candidates
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.cluster_zones import ClusterZones
from orchestrator.backends.kubernetes.config import COST_CONFIG_ENV, PRICE_CATALOG_ENV
from orchestrator.catalog.offers import read_offers_csv
from orchestrator.controller.admission import Refused, admit
from orchestrator.controller.kube_spend import KubeSpend
from orchestrator.costs.budgets import CostConfig, load_cost_config
from orchestrator.costs.user_limits import UserStanding
from orchestrator.errors import GpuctlError
from orchestrator.spec import JobSpec
from orchestrator.state.status import JobStatus

log = logging.getLogger(__name__)


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


def spend(config: CostConfig, api: Any | None) -> KubeSpend:
    """The operator's sources of spend: the GPUJobs :func:`ledger_gpujobs` lists, and the ledger
    database when one is configured (:mod:`orchestrator.controller.kube_spend`)."""
    return KubeSpend(lambda: ledger_gpujobs(config, api), ledger_store())


def user_standing(
    spec: JobSpec, body: Mapping[str, Any], now: datetime, api: Any | None
) -> UserStanding | None:
    """Where GPUJob ``body``'s user stands against its limits on this pass; None without limits."""
    config = cost_config()
    limits = config.users.of(spec.user)
    if not limits.any:
        return None
    try:
        sources = spend(config, api)
    except GpuctlError as err:  # a bad database URL: the GPUJobs stand in, as when it cannot be read
        log.warning("user limits from the GPUJobs: the ledger database cannot be used (%s)", err.what)
        sources = KubeSpend(lambda: ledger_gpujobs(config, api))
    return sources.running_standing(body, limits, now)


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
    sources = spend(config, api)
    decision = admit(
        spec,
        lambda s: cluster_candidates(s, cluster),
        config,
        lambda budget: sources.team_spent(budget, now),
        namespace,
        lambda user, limits: sources.admission_standing(user, limits, now),
    )
    return decision if isinstance(decision, Refused) else None
