"""Per-user limits beside the team budgets: a monthly budget, an hourly spend cap across the user's
running jobs, and a maximum of concurrent jobs, on every backend.

The controller config's ``budgets:`` section (the chart's ``budgets.users`` / ``budgets.defaultUser``)::

    budgets:
      users:
        alice: {monthly_usd: 300, hourly_usd: 40, max_jobs: 3}
        bob: {max_jobs: null}                 # null: no limit of that kind for bob
      default_user: {monthly_usd: 100, max_jobs: 2}   # every user, and each field a user leaves out

Which limits a job's user has is one rule, :meth:`UserLimitConfig.of`: each field of the user's entry
in ``users`` (matched exactly), else the same field of ``default_user``, else no limit.

What each limit does, on every backend (:mod:`orchestrator.controller.admission` at the door,
:mod:`orchestrator.controller.reconcile` while jobs run):

- ``monthly_usd``: a submission whose estimate does not fit what the user has left this month is
  refused (``over_budget``); once the user's month spend reaches it, every job of the user ends
  ``FAILED (over_budget)``, running ones stopped with their notice grace period to checkpoint;
- ``hourly_usd``: a submission whose hourly price, added to the user's running jobs' (node price x
  nodes), is above the cap is refused; a launch (first, after a preemption, or growing an elastic
  job) that would go above it uses fewer nodes when the job is elastic, else waits (reason
  ``user_hourly``). Running jobs whose price rose are never stopped for it;
- ``max_jobs``: a job beyond it waits ``PENDING`` (reason ``user_jobs``) until one of the user's
  jobs ends; jobs start in the order they were submitted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import UserError

USER_LIMIT_KEYS = ("monthly_usd", "hourly_usd", "max_jobs")


@dataclass(frozen=True)
class UserLimits:
    """One user's limits; ``None``: no limit of that kind."""

    monthly_usd: float | None = None
    hourly_usd: float | None = None
    max_jobs: int | None = None
    origin: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Limit field -> the setting it came from (``budgets.users.alice.max_jobs``), for messages."""

    @property
    def any(self) -> bool:
        return self.monthly_usd is not None or self.hourly_usd is not None or self.max_jobs is not None

    def setting(self, key: str) -> str:
        return self.origin.get(key, f"budgets.default_user.{key}")


@dataclass(frozen=True)
class UserLimitConfig:
    users: Mapping[str, Mapping[str, float | int | None]] = field(default_factory=dict)
    """User -> the fields its entry sets (``None``: set to no limit)."""
    default_user: Mapping[str, float | int | None] = field(default_factory=dict)

    @property
    def configured(self) -> bool:
        return bool(self.users) or bool(self.default_user)

    def of(self, user: str) -> UserLimits:
        """``user``'s limits: its own entry's fields, else ``default_user``'s."""
        values: dict[str, Any] = {}
        origin: dict[str, str] = {}
        own = self.users.get(user, {})
        for key in USER_LIMIT_KEYS:
            if key in own:
                values[key], origin[key] = own[key], f"budgets.users.{user}.{key}"
            elif key in self.default_user:
                values[key], origin[key] = self.default_user[key], f"budgets.default_user.{key}"
        return UserLimits(**values, origin=origin)


# --- parsing -----------------------------------------------------------------------------------
def _limit(key: str, value: object, where: str, source: str) -> float | int | None:
    if value is None:
        return None
    if key == "max_jobs":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(
                f"{source}: {where} is {value!r}, not a number of jobs (a whole number, 1 or more)",
                f"set {where} to how many jobs the user may run at once, such as 3, or null for no limit",
            )
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        per = "month" if key == "monthly_usd" else "hour"
        raise UserError(
            f"{source}: {where} is {value!r}, not an amount of USD (a finite number, 0 or more)",
            f"set {where} to a number of USD per {per}, such as {300 if per == 'month' else 40}, "
            "or null for no limit",
        )
    return float(value)


def _entry(value: object, where: str, source: str) -> dict[str, float | int | None]:
    if not isinstance(value, Mapping):
        raise UserError(
            f"{source}: {where} is {value!r}, not a mapping of limits",
            "write it as '{monthly_usd: 300, hourly_usd: 40, max_jobs: 3}' (each field optional)",
        )
    unknown = sorted(str(k) for k in value if k not in USER_LIMIT_KEYS)
    if unknown:
        raise UserError(
            f"{source}: {where}.{unknown[0]} is not a user limit", f"use {', '.join(USER_LIMIT_KEYS)}"
        )
    return {str(k): _limit(str(k), v, f"{where}.{k}", source) for k, v in value.items()}


def parse_user_limits(section: Mapping[str, Any], source: str) -> UserLimitConfig:
    """``budgets.users`` and ``budgets.default_user`` of the ``budgets`` section."""
    users = section.get("users") or {}
    if not isinstance(users, Mapping):
        raise UserError(
            f"{source}: budgets.users is {users!r}, not a mapping of users",
            "write it as 'users: {alice: {monthly_usd: 300, hourly_usd: 40, max_jobs: 3}}'",
        )
    default = section.get("default_user")
    return UserLimitConfig(
        users={str(u): _entry(e, f"budgets.users.{u}", source) for u, e in users.items()},
        default_user={} if default is None else _entry(default, "budgets.default_user", source),
    )


# --- where a user stands, and what it allows ----------------------------------------------------
@dataclass(frozen=True)
class UserStanding:
    """Where a job's user stands against its limits now (what reconcile reads)."""

    user: str
    limits: UserLimits
    month_spent_usd: float = 0.0
    """What the user's jobs spent this calendar month, on every backend the spend is summed over."""
    others_hourly_usd: float = 0.0
    """The user's other running jobs: the sum of their node price x nodes, USD an hour."""
    ahead: int = 0
    """The user's other jobs that hold a slot (have started and not ended) or were submitted before
    this one and wait for one."""


def month_exceeded(standing: UserStanding) -> str | None:
    """Why the user's jobs must stop: its month spend reached ``monthly_usd``; else None."""
    cap = standing.limits.monthly_usd
    if cap is None or standing.month_spent_usd < cap:
        return None
    return (
        f"user '{standing.user}' spent {standing.month_spent_usd:.2f} of its {cap:.2f} USD monthly budget "
        f"({standing.limits.setting('monthly_usd')})"
    )


def slot_wait(standing: UserStanding) -> str | None:
    """Why the job may not start yet: ``max_jobs`` of the user's jobs run or are ahead of it; else None."""
    cap = standing.limits.max_jobs
    if cap is None or standing.ahead < cap:
        return None
    return (
        f"user '{standing.user}' has {standing.ahead} job(s) running or ahead in line, its limit "
        f"({standing.limits.setting('max_jobs')} = {cap}); starts when one of them ends"
    )


def nodes_within_cap(standing: UserStanding | None, node_price_usd: float, nodes: int, min_nodes: int) -> int:
    """How many of ``nodes`` (at ``node_price_usd`` an hour each) may launch under the user's hourly cap
    beside its running jobs: ``nodes``, fewer (not below ``min_nodes``), or 0 (wait)."""
    cap = standing.limits.hourly_usd if standing is not None else None
    if standing is None or cap is None or node_price_usd <= 0:
        return nodes
    room = cap - standing.others_hourly_usd
    fit = min(nodes, math.floor(room / node_price_usd + 1e-9)) if room > 0 else 0
    return fit if fit >= min_nodes else 0


def hourly_wait(standing: UserStanding, hourly_usd: float) -> str:
    """The waiting line of a launch held by the hourly cap (``hourly_usd``: the launch's price)."""
    cap = standing.limits.hourly_usd or 0.0
    return (
        f"user '{standing.user}' runs {standing.others_hourly_usd:.2f} USD/h; this launch adds "
        f"{hourly_usd:.2f}, above its {cap:.2f} USD/h cap ({standing.limits.setting('hourly_usd')}); "
        "starts when the user's running jobs leave room"
    )


def check_user_submission(
    job: str, standing: UserStanding, estimated_hourly_usd: float, estimate_usd: float, what: str
) -> None:
    """Raise :class:`UserError` with the numbers when ``job`` would go over its user's month
    (``estimate_usd``: ``what``, its estimated cost or one hour of it) or hourly cap."""
    limits, user = standing.limits, standing.user
    if limits.monthly_usd is not None:
        left = limits.monthly_usd - standing.month_spent_usd
        if estimate_usd > left:
            raise UserError(
                f"user '{user}' has ${max(left, 0.0):.2f} left of its ${limits.monthly_usd:.2f} monthly "
                f"budget (spent ${standing.month_spent_usd:.2f}); {what} of job '{job}' is ${estimate_usd:.2f}",
                f"ask an admin to raise {limits.setting('monthly_usd')} in the controller config (the "
                "chart's budgets on Kubernetes), or wait for next month",
            )
    cap = limits.hourly_usd
    if cap is not None and standing.others_hourly_usd + estimated_hourly_usd > cap:
        raise UserError(
            f"user '{user}' runs ${standing.others_hourly_usd:.2f}/h; job '{job}' adds "
            f"${estimated_hourly_usd:.2f}/h, above its ${cap:.2f}/h cap",
            f"wait for a running job of the user to end, use fewer nodes or cheaper GPU types, or ask "
            f"an admin to raise {limits.setting('hourly_usd')}",
        )
