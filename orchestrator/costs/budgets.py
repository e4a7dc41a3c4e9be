"""Budgets: refuse submissions that would overrun a team's month, stop jobs over their own budget.

The controller config file (YAML) holds team budgets and the report schedule::

    budgets:
      teams: {ml-research: 1000}
    reports:
      schedule: "0 8 * * *"
      folder: ~/.gpuctl/reports
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from orchestrator.costs.ledger import Window, segment_cost
from orchestrator.errors import UserError
from orchestrator.spec.model import JobSpec
from orchestrator.state.records import JobRecord, SegmentRecord, segment_cost_usd


@dataclass(frozen=True)
class CostConfig:
    team_budgets_usd: Mapping[str, float] = field(default_factory=dict)
    report_schedule: str | None = None
    report_folder: Path | None = None

    def team_budget(self, team: str) -> float | None:
        return self.team_budgets_usd.get(team)


def _section(doc: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    value = doc.get(key) or {}
    if not isinstance(value, Mapping):
        raise UserError(f"{source}: '{key}' must be a mapping", f"write it as '{key}: {{...}}'")
    return value


def parse_cost_config(text: str, source: str = "controller config") -> CostConfig:
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{source}: not valid YAML ({exc})", "fix the YAML syntax") from exc
    if not isinstance(doc, Mapping):
        raise UserError(f"{source}: expected a mapping at the top", "see `budgets:` and `reports:` in docs")
    teams = _section(_section(doc, "budgets", source), "teams", source)
    budgets: dict[str, float] = {}
    for team, amount in teams.items():
        if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
            raise UserError(
                f"{source}: budgets.teams.{team} is {amount!r}, not an amount of USD",
                "give a number of USD per month, such as 1000",
            )
        budgets[str(team)] = float(amount)
    reports = _section(doc, "reports", source)
    schedule = reports.get("schedule")
    folder = reports.get("folder")
    return CostConfig(
        team_budgets_usd=budgets,
        report_schedule=str(schedule) if schedule else None,
        report_folder=Path(str(folder)).expanduser() if folder else None,
    )


def load_cost_config(path: Path | str) -> CostConfig:
    p = Path(path)
    if not p.exists():
        return CostConfig()
    return parse_cost_config(p.read_text(encoding="utf-8"), str(p))


def month_window(now: datetime) -> Window:
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return Window(start, end)


def team_month_spent(
    jobs: Iterable[JobRecord], segments: Iterable[SegmentRecord], team: str, now: datetime
) -> float:
    """What ``team`` spent in the calendar month of ``now`` (up to ``now``)."""
    ids = {j.id for j in jobs if j.team == team}
    window = month_window(now)
    return sum(segment_cost(s, now, window).cost_usd for s in segments if s.job_id in ids)


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def gpujob_month_spent(gpujobs: Iterable[Mapping[str, Any]], team: str, now: datetime) -> float:
    """What ``team`` spent in the calendar month of ``now`` by its GPUJobs (Kubernetes keeps each job's
    segments in the GPUJob's ``status.segments``: start, end, nodes, nodePriceUsdPerHour).

    A GPUJob's team is its ``spec.team`` (``default`` when unset, as in a job spec)."""
    window = month_window(now)
    total = 0.0
    for obj in gpujobs:
        if str((obj.get("spec") or {}).get("team") or "default") != team:
            continue
        for seg in (obj.get("status") or {}).get("segments") or []:
            start = max(_when(str(seg["start"])), window.start)
            end = min(_when(str(seg["end"])) if seg.get("end") else now, window.end, now)
            hours = max(0.0, (end - start).total_seconds() / 3600.0)
            total += segment_cost_usd(
                hours, int(seg.get("nodes", 0)), float(seg.get("nodePriceUsdPerHour") or 0.0)
            )
    return total


def check_submission(
    spec: JobSpec,
    estimated_hourly_usd: float,
    team_month_spent: float,
    team_budget: float | None,
) -> None:
    """Raise :class:`UserError` with the numbers when the job cannot start within its limits.

    Checks the spec's ``max_hourly_usd``, that its ``budget_usd`` covers its estimated
    ``compute_hours``, and that the team has money left this month for the job (its whole estimate
    when ``compute_hours`` is known, else one hour).
    """
    cap = spec.market.max_hourly_usd
    if cap is not None and estimated_hourly_usd > cap:
        raise UserError(
            f"job '{spec.name}' would cost ${estimated_hourly_usd:.2f}/h, "
            f"above its max_hourly_usd ${cap:.2f}/h",
            "raise market.max_hourly_usd, allow spot or cheaper GPU types, or use fewer nodes",
        )
    hours = spec.goals.compute_hours
    estimate = estimated_hourly_usd * (hours if hours is not None else 1.0)
    budget = spec.goals.budget_usd
    if budget is not None and hours is not None and estimate > budget:
        raise UserError(
            f"job '{spec.name}' needs about ${estimate:.2f} ({hours:g} h at ${estimated_hourly_usd:.2f}/h), "
            f"above its budget_usd ${budget:.2f}",
            "raise goals.budget_usd, allow spot or cheaper GPU types, or lower compute_hours",
        )
    if team_budget is None:
        return
    left = team_budget - team_month_spent
    if estimate > left:
        what = "its estimated cost" if hours is not None else "one hour of it"
        raise UserError(
            f"team '{spec.team}' has ${max(left, 0.0):.2f} left of its ${team_budget:.2f} monthly budget "
            f"(spent ${team_month_spent:.2f}); {what} is ${estimate:.2f}",
            "ask an admin to raise budgets.teams in the controller config, or wait for next month",
        )


def over_budget(job_cost: float, budget_usd: float | None) -> bool:
    """True when a job has spent its whole budget (no budget: never)."""
    return budget_usd is not None and job_cost >= budget_usd
