"""Budgets: refuse submissions that would overrun a team's month, stop jobs over their own budget.

The controller config file (YAML) holds team budgets and the report schedule::

    budgets:
      teams: {ml-research: 1000}          # USD per calendar month, per team
      other_teams_monthly_usd: 200        # one budget shared by every team not in `teams`
      namespace_teams: {ns-a: [ml-research]}  # Kubernetes: the teams each namespace may charge
      users: {alice: {monthly_usd: 300, hourly_usd: 40, max_jobs: 3}}  # per user (user_limits.py)
      default_user: {max_jobs: 4}         # every user, and each field a user's entry leaves out
      spend_namespaces: [ns-a, ns-b]      # Kubernetes: whose GPUJobs spend sums (default: all)
    reports:
      schedule: "0 8 * * *"
      folder: ~/.gpuctl/reports

Which budget a job's team charges is one rule for every backend, :func:`team_budget`: a team named in
``teams`` (exactly, case included) charges its own; any other team charges the shared
``other_teams_monthly_usd``, or is refused when that is not set and ``teams`` is; with no budgets at
all there is no limit (a single user's own machine). On Kubernetes a namespace may charge only the
teams ``namespace_teams`` lists for it, and with no ``namespace_teams`` only the team named as the
namespace. Per-user limits (``users``, ``default_user``) are :mod:`orchestrator.costs.user_limits`.

Spend is summed by one function per source, whatever it is summed for (a team's budget, a user's
month, a user's running hourly rate): :func:`month_spent` and :func:`running_hourly_usd` over the job
store's jobs and segments, :func:`gpujobs_month_spent` and :func:`gpujobs_running_hourly_usd` over
GPUJobs (Kubernetes keeps each job's segments in its status).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.costs.ledger import Window, segment_cost
from orchestrator.costs.user_limits import UserLimitConfig, UserLimits, UserStanding, parse_user_limits
from orchestrator.errors import UserError
from orchestrator.spec.model import JobSpec
from orchestrator.state.records import JobRecord, SegmentRecord, segment_cost_usd
from orchestrator.state.status import JobStatus
from orchestrator.times import parse_iso
from orchestrator.userfiles import CONFIG_FIX, load_yaml, read_optional_text

BUDGET_KEYS = (
    "teams",
    "other_teams_monthly_usd",
    "namespace_teams",
    "users",
    "default_user",
    "spend_namespaces",
)


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
    """Kubernetes: the teams a namespace's GPUJobs may charge; empty: each namespace only the team
    named as it."""
    users: UserLimitConfig = field(default_factory=UserLimitConfig)
    """Per-user limits (``budgets.users``, ``budgets.default_user``)."""
    spend_namespaces: tuple[str, ...] | None = None
    """Kubernetes: the namespaces whose GPUJobs spend is summed over (the chart writes its watched
    namespaces); ``None``: every namespace (an operator watching the whole cluster)."""
    report_schedule: str | None = None
    report_folder: Path | None = None

    @property
    def has_budgets(self) -> bool:
        return bool(self.team_budgets_usd) or self.other_teams_monthly_usd is not None

    def namespaces_charging(self, budget: TeamBudget) -> tuple[str, ...]:
        """The namespaces whose GPUJobs may charge ``budget`` (by ``namespace_teams``)."""
        return tuple(ns for ns, teams in self.namespace_teams.items() if any(map(budget.counts, teams)))


def namespace_may_charge(config: CostConfig, namespace: str) -> tuple[str, ...]:
    """The teams a GPUJob in ``namespace`` may charge: ``namespace_teams``' list for it, or, with no
    ``namespace_teams`` at all, the team named as the namespace."""
    if not config.namespace_teams:
        return (namespace,)
    return config.namespace_teams.get(namespace, ())


def with_namespace_team(spec: JobSpec, config: CostConfig, namespace: str) -> JobSpec:
    """A job spec submitted to Kubernetes without a ``team``: charged to the one team its namespace may
    charge (by default the namespace's own name); as it is when it names a team, or when the namespace
    may charge several teams or none (admission then says which)."""
    allowed = namespace_may_charge(config, namespace)
    if "team" in spec.model_fields_set or len(allowed) != 1:
        return spec
    return spec.model_copy(update={"team": allowed[0]})


def _namespace_refusal(config: CostConfig, team: str, namespace: str) -> UserError | None:
    allowed = namespace_may_charge(config, namespace)
    if team in allowed:
        return None
    may = f"may charge only {', '.join(repr(t) for t in allowed)}" if allowed else "may charge no team"
    rule = (
        "budgets.namespace_teams" if config.namespace_teams else "by default, the team named as the namespace"
    )
    return UserError(
        f"team '{team}' may not be charged from namespace '{namespace}': it {may} ({rule})",
        "set the job's team to one its namespace may charge, exactly as spelled, or ask an admin to "
        "list the team for the namespace in the chart's budgets.namespaceTeams",
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
        "users": parse_user_limits(section, source),
        "spend_namespaces": _spend_namespaces(section, source),
    }


def _spend_namespaces(section: Mapping[str, Any], source: str) -> tuple[str, ...] | None:
    value = section.get("spend_namespaces")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(ns, str) for ns in value):
        raise UserError(
            f"{source}: budgets.spend_namespaces is {value!r}, not a list of namespaces",
            "write it as 'spend_namespaces: [ns-a, ns-b]', or leave it out to sum every namespace",
        )
    return tuple(value)


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

JobMatch = Callable[[JobRecord], bool]
"""Which jobs of the store count (a team's, a user's)."""


def _matcher(team: TeamMatch) -> Callable[[str], bool]:
    return team.__eq__ if isinstance(team, str) else team


def month_spent(
    jobs: Iterable[JobRecord], segments: Iterable[SegmentRecord], counts: JobMatch, now: datetime
) -> float:
    """What the jobs ``counts`` picks spent in the calendar month of ``now`` (up to ``now``), from the
    job store's jobs and segments: the one sum every budget and limit reads on local and SLURM."""
    ids = {j.id for j in jobs if counts(j)}
    window = month_window(now)
    return sum(segment_cost(s, now, window).cost_usd for s in segments if s.job_id in ids)


def running_hourly_usd(
    jobs: Iterable[JobRecord], segments: Iterable[SegmentRecord], counts: JobMatch
) -> float:
    """What the running jobs ``counts`` picks cost an hour now: node price x nodes of each open
    segment of a job that has not ended."""
    ids = {j.id for j in jobs if counts(j) and not j.status.terminal}
    return sum(
        s.node_price_usd_per_hour * s.nodes for s in segments if s.job_id in ids and s.ended_at is None
    )


def team_month_spent(
    jobs: Iterable[JobRecord], segments: Iterable[SegmentRecord], team: TeamMatch, now: datetime
) -> float:
    """What ``team`` spent in the calendar month of ``now`` (up to ``now``)."""
    counts = _matcher(team)
    return month_spent(jobs, segments, lambda j: counts(j.team), now)


def _holds_slot(status: JobStatus) -> bool:
    return not status.terminal and status is not JobStatus.PENDING


def user_standing(
    jobs: Sequence[JobRecord],
    segments: Sequence[SegmentRecord],
    job: JobRecord,
    limits: UserLimits,
    now: datetime,
) -> UserStanding:
    """Where ``job``'s user stands (:class:`UserStanding`), from the job store's jobs and segments
    (``segments``: at least those of this month and the open ones)."""
    mine = [j for j in jobs if j.user == job.user]
    others = [j for j in mine if j.id != job.id]
    ahead = sum(
        1
        for j in others
        if _holds_slot(j.status)
        or (j.status is JobStatus.PENDING and (j.submitted_at, j.id) < (job.submitted_at, job.id))
    )
    ids = {j.id for j in others}
    return UserStanding(
        user=job.user,
        limits=limits,
        month_spent_usd=month_spent(mine, segments, lambda _: True, now),
        others_hourly_usd=running_hourly_usd(others, segments, lambda j: j.id in ids),
        ahead=ahead,
    )


def submitted_user_standing(
    jobs: Sequence[JobRecord], segments: Sequence[SegmentRecord], user: str, limits: UserLimits, now: datetime
) -> UserStanding:
    """Where ``user`` stands for a job not stored yet (admission): every job of the user is ahead."""
    mine = [j for j in jobs if j.user == user]
    return UserStanding(
        user=user,
        limits=limits,
        month_spent_usd=month_spent(mine, segments, lambda _: True, now),
        others_hourly_usd=running_hourly_usd(mine, segments, lambda _: True),
        ahead=sum(1 for j in mine if not j.status.terminal),
    )


# --- GPUJobs (Kubernetes): each job's segments in its status ------------------------------------
GpuJobMatch = Callable[[Mapping[str, Any]], bool]
"""Which GPUJobs count (a team's, a user's)."""


def gpujob_team(obj: Mapping[str, Any]) -> str:
    """A GPUJob's team: its ``spec.team`` (``default`` when unset, as in a job spec)."""
    return str((obj.get("spec") or {}).get("team") or "default")


def gpujob_user(obj: Mapping[str, Any]) -> str:
    """A GPUJob's user: its namespace (whatever ``spec.user`` says, as
    :func:`orchestrator.backends.kubernetes.gpujob.job_spec` rules), else the user its status records."""
    namespace = (obj.get("metadata") or {}).get("namespace")
    return str(namespace or (obj.get("status") or {}).get("user") or "")


def gpujobs_month_spent(gpujobs: Iterable[Mapping[str, Any]], counts: GpuJobMatch, now: datetime) -> float:
    """What the GPUJobs ``counts`` picks spent in the calendar month of ``now`` (their
    ``status.segments``: start, end, nodes, nodePriceUsdPerHour): the one sum over GPUJobs."""
    window = month_window(now)
    total = 0.0
    for obj in gpujobs:
        if not counts(obj):
            continue
        for seg in (obj.get("status") or {}).get("segments") or []:
            start = max(parse_iso(str(seg["start"])), window.start)
            end = min(parse_iso(str(seg["end"])) if seg.get("end") else now, window.end, now)
            hours = max(0.0, (end - start).total_seconds() / 3600.0)
            total += segment_cost_usd(
                hours, int(seg.get("nodes", 0)), float(seg.get("nodePriceUsdPerHour") or 0.0)
            )
    return total


def _gpujob_ended(obj: Mapping[str, Any]) -> bool:
    state = (obj.get("status") or {}).get("state")
    return bool(state) and JobStatus(str(state)).terminal


def gpujobs_running_hourly_usd(gpujobs: Iterable[Mapping[str, Any]], counts: GpuJobMatch) -> float:
    """What the running GPUJobs ``counts`` picks cost an hour now (their open segments)."""
    total = 0.0
    for obj in gpujobs:
        if not counts(obj) or _gpujob_ended(obj):
            continue
        for seg in (obj.get("status") or {}).get("segments") or []:
            if not seg.get("end"):
                total += int(seg.get("nodes", 0)) * float(seg.get("nodePriceUsdPerHour") or 0.0)
    return total


def gpujob_month_spent(gpujobs: Iterable[Mapping[str, Any]], team: TeamMatch, now: datetime) -> float:
    """What ``team`` spent in the calendar month of ``now`` by its GPUJobs (:func:`gpujob_team`)."""
    counts = _matcher(team)
    return gpujobs_month_spent(gpujobs, lambda obj: counts(gpujob_team(obj)), now)


def _gpujob_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return (
        str(meta.get("creationTimestamp") or ""),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )


def gpujob_user_standing(
    gpujobs: Sequence[Mapping[str, Any]], job: Mapping[str, Any], limits: UserLimits, now: datetime
) -> UserStanding:
    """Where GPUJob ``job``'s user stands, from ``gpujobs`` (every GPUJob the spend is summed over)."""
    user, key = gpujob_user(job), _gpujob_key(job)
    mine = [obj for obj in gpujobs if gpujob_user(obj) == user]
    others = [obj for obj in mine if _gpujob_key(obj)[1:] != key[1:]]

    def ahead(obj: Mapping[str, Any]) -> bool:
        state = str((obj.get("status") or {}).get("state") or JobStatus.PENDING)
        return _holds_slot(JobStatus(state)) or (state == JobStatus.PENDING and _gpujob_key(obj) < key)

    return UserStanding(
        user=user,
        limits=limits,
        month_spent_usd=gpujobs_month_spent(mine, lambda _: True, now),
        others_hourly_usd=gpujobs_running_hourly_usd(others, lambda _: True),
        ahead=sum(1 for obj in others if ahead(obj)),
    )


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
