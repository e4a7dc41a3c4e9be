"""Budgets: refuse submissions that would overrun a team's month, stop jobs over their own budget.

The controller config file (YAML) holds team budgets and the report schedule::

    budgets:
      teams: {ml-research: 1000}          # USD per calendar month, per team
      other_teams_monthly_usd: 200        # one budget shared by every team not in `teams`
      namespace_teams: {ns-a: [ml-research]}  # Kubernetes: the teams each namespace may charge
    reports:
      schedule: "0 8 * * *"
      folder: ~/.gpuctl/reports

Which budget a job's team charges is one rule for every backend, :func:`team_budget`: a team named in
``teams`` (exactly, case included) charges its own; any other team charges the shared
``other_teams_monthly_usd``, or is refused when that is not set and ``teams`` is; with no budgets at
all there is no limit (a single user's own machine). On Kubernetes a namespace may charge only the
teams ``namespace_teams`` lists for it, when that is set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.costs.ledger import Window, segment_cost
from orchestrator.errors import UserError
from orchestrator.spec.model import JobSpec
from orchestrator.state.records import JobRecord, SegmentRecord, segment_cost_usd
from orchestrator.times import parse_iso
from orchestrator.userfiles import CONFIG_FIX, load_yaml, read_optional_text

BUDGET_KEYS = ("teams", "other_teams_monthly_usd", "namespace_teams")


@dataclass(frozen=True)
class TeamBudget:
    """The monthly budget a job's team charges, and whose spend counts against it."""

    team: str
    monthly_usd: float | None
    """``None``: no limit (no budgets are configured)."""
    listed: frozenset[str] | None = None
    """``None``: the team's own budget. Else the budget is the one shared by every team not in
    ``listed`` (the teams with their own budget)."""

    def counts(self, team: str) -> bool:
        """Whether ``team``'s spend comes out of this budget."""
        return team == self.team if self.listed is None else team not in self.listed

    @property
    def label(self) -> str:
        if self.listed is None:
            return f"team '{self.team}'"
        return f"team '{self.team}' (sharing budgets.other_teams_monthly_usd with every team not in budgets.teams)"


@dataclass(frozen=True)
class CostConfig:
    team_budgets_usd: Mapping[str, float] = field(default_factory=dict)
    other_teams_monthly_usd: float | None = None
    """The one budget every team not in ``team_budgets_usd`` shares; ``None``: such teams are refused
    (when ``team_budgets_usd`` is set) or unlimited (when no budgets are configured)."""
    namespace_teams: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Kubernetes: the teams a namespace's GPUJobs may charge; empty: any team."""
    report_schedule: str | None = None
    report_folder: Path | None = None

    @property
    def has_budgets(self) -> bool:
        return bool(self.team_budgets_usd) or self.other_teams_monthly_usd is not None

    def namespaces_charging(self, budget: TeamBudget) -> tuple[str, ...]:
        """The namespaces whose GPUJobs may charge ``budget`` (by ``namespace_teams``)."""
        return tuple(ns for ns, teams in self.namespace_teams.items() if any(map(budget.counts, teams)))


def _namespace_refusal(config: CostConfig, team: str, namespace: str) -> UserError | None:
    if not config.namespace_teams:
        return None
    allowed = config.namespace_teams.get(namespace, ())
    if team in allowed:
        return None
    may = f"may charge only {', '.join(repr(t) for t in allowed)}" if allowed else "may charge no team"
    return UserError(
        f"team '{team}' may not be charged from namespace '{namespace}': it {may} (budgets.namespace_teams)",
        "set the job's team to one its namespace may charge, exactly as spelled, or ask an admin to "
        "add it to the chart's budgets.namespaceTeams",
    )


def _unlisted_refusal(config: CostConfig, team: str) -> UserError | None:
    """A team not in ``budgets.teams``: refused if it differs from a listed one only in case, or when
    there is no shared budget for unlisted teams."""
    listed = sorted(config.team_budgets_usd)
    alike = [t for t in listed if t.casefold() == team.casefold()]
    if alike:
        return UserError(
            f"team '{team}' is not '{alike[0]}': team names must match budgets.teams exactly",
            f"write team: {alike[0]}",
        )
    if config.other_teams_monthly_usd is not None or not listed:
        return None
    return UserError(
        f"team '{team}' has no budget: budgets.teams lists only {', '.join(listed)}, and "
        "budgets.other_teams_monthly_usd is not set",
        "use one of those teams, exactly as spelled, or ask an admin to add the team to budgets.teams "
        "or to set budgets.other_teams_monthly_usd",
    )


def team_budget(config: CostConfig, team: str, namespace: str | None = None) -> TeamBudget:
    """The budget ``team`` charges, on every backend; raise :class:`UserError` when it may not be
    charged (``namespace``: the GPUJob's, checked against ``budgets.namespace_teams``)."""
    refusal = _namespace_refusal(config, team, namespace) if namespace is not None else None
    if refusal is None and team not in config.team_budgets_usd:
        refusal = _unlisted_refusal(config, team)
    if refusal is not None:
        raise refusal
    if team in config.team_budgets_usd:
        return TeamBudget(team, config.team_budgets_usd[team])
    if config.other_teams_monthly_usd is not None:
        return TeamBudget(team, config.other_teams_monthly_usd, frozenset(config.team_budgets_usd))
    return TeamBudget(team, None)


def _section(doc: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    value = doc.get(key) or {}
    if not isinstance(value, Mapping):
        raise UserError(f"{source}: '{key}' must be a mapping", f"write it as '{key}: {{...}}'")
    return value


def usd_amount(value: object, where: str, source: str) -> float:
    """``value`` as a finite amount of USD, 0 or more; else :class:`UserError` naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise UserError(
            f"{source}: {where} is {value!r}, not an amount of USD (a finite number, 0 or more)",
            f"set {where} to a number of USD per month, such as 1000",
        )
    return float(value)


def _namespace_teams(section: Mapping[str, Any], source: str) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for namespace, teams in _section(section, "namespace_teams", source).items():
        if not isinstance(teams, list) or not all(isinstance(t, str) for t in teams):
            raise UserError(
                f"{source}: budgets.namespace_teams.{namespace} is {teams!r}, not a list of team names",
                f"write it as '{namespace}: [team-a, team-b]'",
            )
        out[str(namespace)] = tuple(teams)
    return out


def _budgets(doc: Mapping[str, Any], source: str) -> dict[str, Any]:
    section = _section(doc, "budgets", source)
    unknown = sorted(str(k) for k in section if k not in BUDGET_KEYS)
    if unknown:
        raise UserError(
            f"{source}: budgets.{unknown[0]} is not a budgets setting", f"use {', '.join(BUDGET_KEYS)}"
        )
    teams = _section(section, "teams", source)
    other = section.get("other_teams_monthly_usd")
    return {
        "team_budgets_usd": {str(t): usd_amount(a, f"budgets.teams.{t}", source) for t, a in teams.items()},
        "other_teams_monthly_usd": (
            None if other is None else usd_amount(other, "budgets.other_teams_monthly_usd", source)
        ),
        "namespace_teams": _namespace_teams(section, source),
    }


def parse_cost_config(text: str, source: str = "controller config") -> CostConfig:
    doc = load_yaml(text, source) or {}
    if not isinstance(doc, Mapping):
        raise UserError(f"{source}: expected a mapping at the top", "see `budgets:` and `reports:` in docs")
    reports = _section(doc, "reports", source)
    schedule = reports.get("schedule")
    folder = reports.get("folder")
    return CostConfig(
        **_budgets(doc, source),
        report_schedule=str(schedule) if schedule else None,
        report_folder=Path(str(folder)).expanduser() if folder else None,
    )


def load_cost_config(path: Path | str) -> CostConfig:
    text = read_optional_text(path, "controller config", CONFIG_FIX)
    return CostConfig() if text is None else parse_cost_config(text, str(path))


def month_window(now: datetime) -> Window:
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return Window(start, end)


TeamMatch = str | Callable[[str], bool]
"""A team's name, or which teams count (:meth:`TeamBudget.counts`)."""


def _matcher(team: TeamMatch) -> Callable[[str], bool]:
    return team.__eq__ if isinstance(team, str) else team


def team_month_spent(
    jobs: Iterable[JobRecord], segments: Iterable[SegmentRecord], team: TeamMatch, now: datetime
) -> float:
    """What ``team`` spent in the calendar month of ``now`` (up to ``now``)."""
    counts = _matcher(team)
    ids = {j.id for j in jobs if counts(j.team)}
    window = month_window(now)
    return sum(segment_cost(s, now, window).cost_usd for s in segments if s.job_id in ids)


def gpujob_month_spent(gpujobs: Iterable[Mapping[str, Any]], team: TeamMatch, now: datetime) -> float:
    """What ``team`` spent in the calendar month of ``now`` by its GPUJobs (Kubernetes keeps each job's
    segments in the GPUJob's ``status.segments``: start, end, nodes, nodePriceUsdPerHour).

    A GPUJob's team is its ``spec.team`` (``default`` when unset, as in a job spec)."""
    window = month_window(now)
    counts = _matcher(team)
    total = 0.0
    for obj in gpujobs:
        if not counts(str((obj.get("spec") or {}).get("team") or "default")):
            continue
        for seg in (obj.get("status") or {}).get("segments") or []:
            start = max(parse_iso(str(seg["start"])), window.start)
            end = min(parse_iso(str(seg["end"])) if seg.get("end") else now, window.end, now)
            hours = max(0.0, (end - start).total_seconds() / 3600.0)
            total += segment_cost_usd(
                hours, int(seg.get("nodes", 0)), float(seg.get("nodePriceUsdPerHour") or 0.0)
            )
    return total


def check_submission(
    spec: JobSpec,
    estimated_hourly_usd: float,
    team_month_spent: float,
    team_budget: TeamBudget | None,
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
    if team_budget is None or team_budget.monthly_usd is None:
        return
    left = team_budget.monthly_usd - team_month_spent
    if estimate > left:
        what = "its estimated cost" if hours is not None else "one hour of it"
        raise UserError(
            f"{team_budget.label} has ${max(left, 0.0):.2f} left of its ${team_budget.monthly_usd:.2f} "
            f"monthly budget (spent ${team_month_spent:.2f}); {what} is ${estimate:.2f}",
            "ask an admin to raise budgets.teams in the controller config, or wait for next month",
        )


def over_budget(job_cost: float, budget_usd: float | None) -> bool:
    """True when a job has spent its whole budget (no budget: never)."""
    return budget_usd is not None and job_cost >= budget_usd
