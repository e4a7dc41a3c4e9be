"""Each team budget's burn this month and its forecast, for the costs page.

The budgets are the controller config's (:func:`orchestrator.costs.budgets.load_cost_config`), and
which budget a team charges is :func:`orchestrator.costs.budgets.team_budget`, the rule admission
applies: a team in ``budgets.teams`` has its own row, every other team shares the one
``other_teams_monthly_usd`` row; with no budgets configured every team has a row without a limit.
Spent is :func:`orchestrator.costs.budgets.team_month_spent`; the forecast is spent plus the running
jobs' cost to finish (:func:`orchestrator.costs.projection.costs_to_finish`, the cost report's
projected column), and the month's end at this month's pace so far.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.costs.budgets import CostConfig, TeamBudget, month_window, team_budget, team_month_spent
from orchestrator.costs.report import budget_burn as report_burn
from orchestrator.errors import UserError
from orchestrator.state.records import JobRecord, SegmentRecord

SHARED = "other teams (shared budget)"


@dataclass(frozen=True)
class BudgetBurn:
    """One budget's month: ``monthly_usd`` None is no limit; ``problem``: why its team may not charge."""

    name: str
    teams: list[str]
    monthly_usd: float | None
    spent_usd: float
    to_finish_usd: float
    month_end_pace_usd: float
    daily: list[tuple[float, float]] = field(default_factory=list)
    """(day end as epoch seconds, spent by then) for each day of the month so far."""
    problem: str | None = None

    @property
    def projected_usd(self) -> float:
        return self.spent_usd + self.to_finish_usd

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name, "teams": self.teams, "monthly_usd": self.monthly_usd,
            "spent_usd": round(self.spent_usd, 6), "to_finish_usd": round(self.to_finish_usd, 6),
            "projected_usd": round(self.projected_usd, 6),
            "month_end_pace_usd": round(self.month_end_pace_usd, 6),
            "daily": [[t, round(v, 6)] for t, v in self.daily], "problem": self.problem,
        }  # fmt: skip


def _budget_of(config: CostConfig, team: str) -> tuple[str, TeamBudget | None, str | None]:
    try:
        budget = team_budget(config, team)
    except UserError as err:
        return team, None, err.message
    return (SHARED if budget.listed is not None else team), budget, None


def budget_burns(config: CostConfig, jobs: Sequence[JobRecord], segments: Sequence[SegmentRecord],
                 to_finish: Mapping[str, float], now: datetime) -> list[BudgetBurn]:  # fmt: skip
    """One row per budget charged this month (and per configured team), most spent first."""
    month = month_window(now)
    active = {s.job_id for s in segments if (s.ended_at or now) >= month.start}
    teams = sorted({*config.team_budgets_usd, *(j.team for j in jobs if j.id in active)})
    grouped: dict[str, tuple[TeamBudget | None, str | None, list[str]]] = {}
    for team in teams:
        name, budget, problem = _budget_of(config, team)
        grouped.setdefault(name, (budget, problem, []))[2].append(team)
    burns = [_burn(name, budget, problem, members, jobs, segments, to_finish, now)
             for name, (budget, problem, members) in grouped.items()]  # fmt: skip
    return sorted(burns, key=lambda b: (-b.spent_usd, b.name))


def _burn(name: str, budget: TeamBudget | None, problem: str | None, members: list[str],
          jobs: Sequence[JobRecord], segments: Sequence[SegmentRecord], to_finish: Mapping[str, float],
          now: datetime) -> BudgetBurn:  # fmt: skip
    def counts(team: str) -> bool:
        return budget.counts(team) if budget is not None else team in members

    spent = team_month_spent(jobs, segments, counts, now)
    finishing = sum(to_finish.get(j.id, 0.0) for j in jobs if counts(j.team))
    month = month_window(now)
    elapsed = (now - month.start).total_seconds()
    pace = spent * (month.end - month.start).total_seconds() / elapsed if elapsed > 0 else spent
    return BudgetBurn(
        name=name, teams=members, monthly_usd=budget.monthly_usd if budget is not None else None,
        spent_usd=spent, to_finish_usd=finishing, month_end_pace_usd=pace,
        daily=_daily(jobs, segments, counts, now), problem=problem,
    )  # fmt: skip


def _daily(jobs: Sequence[JobRecord], segments: Sequence[SegmentRecord], counts: Callable[[str], bool],
           now: datetime) -> list[tuple[float, float]]:  # fmt: skip
    """What the budget had spent by the end of each day of the month so far, and by now (the cost
    report's :func:`orchestrator.costs.report.budget_burn`)."""
    burn = report_burn("", 0.0, counts, jobs, segments, now)
    return [(t.timestamp(), v) for t, v in zip(burn.times, burn.cumulative_usd, strict=True)]
