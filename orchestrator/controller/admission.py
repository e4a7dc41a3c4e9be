"""Admission: the one up-front check of a job, before anything is stored (local, SLURM) or created
(Kubernetes), and when the operator first sees a GPUJob.

The checks, in order, and the failure reason of each refusal:

1. the spec's ``market.policy`` names a known market policy (``invalid_spec``);
2. its team may be charged: a team of ``budgets.teams`` exactly, or any team when unlisted teams
   share ``budgets.other_teams_monthly_usd`` or no budgets are configured, and on Kubernetes one its
   namespace may charge (``invalid_spec``; see :func:`orchestrator.costs.budgets.team_budget`);
3. its GPU types are known to the backend's placements (``invalid_spec``), and one of them has an
   offer in the allowed clouds, regions and zones for its market mode (``no_capacity``);
4. the first placement's price fits ``market.max_hourly_usd``, ``goals.budget_usd`` and the money
   left this month in the team's budget (``over_budget``; see
   :func:`orchestrator.costs.budgets.check_submission`);
5. it fits its user's limits: the money left this month in ``monthly_usd``, and the user's running
   jobs' hourly price plus its own within ``hourly_usd`` (``over_budget``; see
   :mod:`orchestrator.costs.user_limits`). ``max_jobs`` refuses nothing: the job waits PENDING.

The decision is a value, :class:`Admitted` or :class:`Refused`; callers turn a refusal into an error
(the CLI) or a FAILED GPUJob (the operator). ``reconcile`` keeps its own checks while a job runs
(its budget spent, its deadline): admission is only the refusal at the door.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.backends.base import Placement
from orchestrator.controller.placement import Candidates, NoPlacement
from orchestrator.costs.budgets import CostConfig, TeamBudget, check_submission, team_budget
from orchestrator.costs.user_limits import UserLimits, UserStanding, check_user_submission
from orchestrator.errors import UserError
from orchestrator.policies.market import POLICIES
from orchestrator.spec import JobSpec, MarketMode
from orchestrator.state.status import FailureReason


@dataclass(frozen=True)
class Admitted:
    placement: Placement
    """The placement the job's price was estimated from (its first choice)."""
    hourly_usd: float
    """That placement's price for the job's largest node count."""


@dataclass(frozen=True)
class Refused:
    reason: FailureReason
    message: str
    how_to_fix: str

    def error(self) -> UserError:
        """The refusal as the CLI reports it (exit code 2, "To fix: ...")."""
        return UserError(self.message, self.how_to_fix)


Admission = Admitted | Refused

PlacementSearch = Callable[[JobSpec], Candidates]
"""Where a spec may run, by the backend's prices: ``candidates_for`` with a SLURM cluster's own
placements, or the price catalog (``catalog_candidates``). Raises :class:`UserError` for a GPU type it
does not know and :class:`NoPlacement` when nothing fits the allowed zones."""


MonthSpent = Callable[[TeamBudget], float]
"""What the teams a budget counts (:meth:`TeamBudget.counts`) spent this month: the job store's
segments, or the costs in the GPUJobs' status. Called only for a budget with a limit."""

UserSpent = Callable[[str, UserLimits], UserStanding]
"""Where a user stands against ``limits`` (its month spend, its running jobs' hourly price), from the
same sources as :data:`MonthSpent`. Called only for a user with a monthly or hourly limit."""

NO_BUDGETS = CostConfig()


def _nothing_spent(_: TeamBudget) -> float:
    return 0.0


def _nothing_running(user: str, limits: UserLimits) -> UserStanding:
    return UserStanding(user, limits)


def user_refusal(spec: JobSpec, hourly: float, costs: CostConfig, user_spent: UserSpent) -> Refused | None:
    """The job would go over its user's month or hourly cap (``hourly``: its estimated price)."""
    limits = costs.users.of(spec.user)
    if limits.monthly_usd is None and limits.hourly_usd is None:
        return None
    hours = spec.goals.compute_hours
    estimate = hourly * (hours if hours is not None else 1.0)
    what = "the estimated cost" if hours is not None else "one hour"
    try:
        check_user_submission(spec.name, user_spent(spec.user, limits), hourly, estimate, what)
    except UserError as err:
        return Refused(FailureReason.OVER_BUDGET, err.what, err.fix or "")
    return None


def policy_refusal(spec: JobSpec) -> Refused | None:
    """An unknown ``market.policy`` (``gpuctl validate`` checks this too)."""
    name = spec.market.policy
    if name is None or name in POLICIES:
        return None
    return Refused(
        FailureReason.INVALID_SPEC,
        f"job '{spec.name}': unknown market policy '{name}' (market.policy)",
        f"use one of {', '.join(POLICIES)}, or leave market.policy out for the default",
    )


def first_placement(spec: JobSpec, found: Candidates) -> Placement | None:
    """Where the job would start: the cheapest spot placement unless it runs on-demand only, and
    on-demand when spot is not allowed or has no offer and the mode allows the fallback."""
    spot = found.cheapest_spot if spec.market.mode is not MarketMode.ON_DEMAND else None
    if spot is not None or spec.market.mode is MarketMode.SPOT:
        return spot
    return found.on_demand


def admit(
    spec: JobSpec,
    search: PlacementSearch,
    costs: CostConfig = NO_BUDGETS,
    month_spent: MonthSpent = _nothing_spent,
    namespace: str | None = None,
    user_spent: UserSpent = _nothing_running,
) -> Admission:
    """Admit ``spec`` or say why not; pure given a pure ``search``, ``month_spent`` and ``user_spent``.

    ``costs``: the budgets (``$GPUCTL_HOME/config.yaml``, the chart's ``budgets``); ``namespace``: the
    GPUJob's namespace on Kubernetes (``None`` elsewhere)."""
    refused = policy_refusal(spec)
    if refused is not None:
        return refused
    try:
        budget = team_budget(costs, spec.team, namespace)
    except UserError as err:
        return Refused(FailureReason.INVALID_SPEC, err.what, err.fix or "")
    try:
        found = search(spec)
    except NoPlacement as err:
        return Refused(FailureReason.NO_CAPACITY, err.what, err.fix or "")
    except UserError as err:
        return Refused(FailureReason.INVALID_SPEC, err.what, err.fix or "")
    first = first_placement(spec, found)
    if first is None:
        mode = spec.market.mode
        return Refused(
            FailureReason.NO_CAPACITY,
            f"job '{spec.name}' runs {mode} only, and no {mode} offer of "
            f"{', '.join(spec.resources.gpu_types)} exists where it may run",
            "allow spot-with-fallback, more zones or regions, or other GPU types",
        )
    hourly = first.node_price_usd_per_hour * spec.resources.max_nodes
    spent = month_spent(budget) if budget.monthly_usd is not None else 0.0
    try:
        check_submission(spec, hourly, spent, budget)
    except UserError as err:
        return Refused(FailureReason.OVER_BUDGET, err.what, err.fix or "")
    return user_refusal(spec, hourly, costs, user_spent) or Admitted(first, hourly)
