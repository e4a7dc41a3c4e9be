"""Per-team notification targets from the controller config, ``$GPUCTL_HOME/config.yaml``::

    notify:
      teams:
        ml-research:
          - webhook: {secret: team-slack, key: url}
            format: slack
            events: [budget, failed, stalled]

Each team's list has the form of a job spec's ``notify:`` (:mod:`orchestrator.spec.notify`); a job is
told through both its own targets and its team's. ``avoidable_digest`` (off by default) sends each
team's targets a digest of its avoidable spend on a crontab schedule (UTC)::

    notify:
      avoidable_digest: {schedule: "0 8 * * 1", since: 7d}
 Other sections of the file (``budgets:``,
``reports:``) are :mod:`orchestrator.costs.budgets`'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from orchestrator.errors import UserError
from orchestrator.spec.notify import NotifyTarget, NotifyTargets
from orchestrator.userfiles import CONFIG_FIX, load_yaml, read_optional_text

CONFIG_FILE = "config.yaml"
_TARGETS: TypeAdapter[list[NotifyTarget]] = TypeAdapter(NotifyTargets)


@dataclass(frozen=True)
class DigestConfig:
    """When the avoidable-spend digest goes out (a five-field crontab line, UTC) and the span it covers."""

    schedule: str
    since: str = "7d"


@dataclass(frozen=True)
class NotifyConfig:
    teams: Mapping[str, tuple[NotifyTarget, ...]] = field(default_factory=dict)
    avoidable_digest: DigestConfig | None = None
    """None: no digest (the default)."""

    def targets_for(self, team: str, own: Sequence[NotifyTarget] = ()) -> tuple[NotifyTarget, ...]:
        """A job's own targets (its spec's ``notify``), then its team's."""
        return (*own, *self.teams.get(team, ()))


def parse_notify_config(text: str, source: str = CONFIG_FILE) -> NotifyConfig:
    doc = load_yaml(text, source) or {}
    if not isinstance(doc, Mapping):
        raise UserError(f"{source}: expected a mapping at the top", "see docs/notifications.md")
    section = doc.get("notify") or {}
    if not isinstance(section, Mapping) or set(section) - {"teams", "avoidable_digest"}:
        raise UserError(f"{source}: 'notify' must be a mapping with the keys 'teams' and 'avoidable_digest'",
                        "write it as `notify: {teams: {TEAM: [TARGET, ...]}}` (see docs/notifications.md)")  # fmt: skip
    teams = section.get("teams") or {}
    if not isinstance(teams, Mapping):
        raise UserError(f"{source}: notify.teams must map team names to lists of targets",
                        "write it as `teams: {ml-research: [{webhook: URL}]}`")  # fmt: skip
    parsed: dict[str, tuple[NotifyTarget, ...]] = {}
    for team, targets in teams.items():
        try:
            parsed[str(team)] = tuple(_TARGETS.validate_python(targets or []))
        except ValidationError as exc:
            raise UserError(f"{source}: {_problem(f'notify.teams.{team}', exc)}",
                            "correct that field; the targets are written as a job spec's notify: "
                            "(see docs/notifications.md)") from None  # fmt: skip
    return NotifyConfig(parsed, _digest(section.get("avoidable_digest"), source))


def _digest(value: Any, source: str) -> DigestConfig | None:
    if value is None:
        return None
    fix = 'write it as `avoidable_digest: {schedule: "0 8 * * 1", since: 7d}` (see docs/notifications.md)'
    if not isinstance(value, Mapping) or set(value) - {"schedule", "since"}:
        raise UserError(f"{source}: notify.avoidable_digest must be a mapping with schedule and since", fix)
    schedule, since = value.get("schedule"), value.get("since", "7d")
    if not isinstance(schedule, str) or len(schedule.split()) != 5:
        raise UserError(f"{source}: notify.avoidable_digest.schedule must be a five-field crontab line", fix)
    if not isinstance(since, str) or not since.strip():
        raise UserError(f"{source}: notify.avoidable_digest.since must be a duration such as 7d", fix)
    return DigestConfig(schedule, since)


def _problem(prefix: str, exc: ValidationError) -> str:
    err: Mapping[str, Any] = exc.errors(include_url=False, include_input=False)[0]
    path = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]
                            if not str(p).startswith(("str", "SecretRef", "FromEnv", "function")))  # fmt: skip
    more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
    return f"{path}: {err['msg'].removeprefix('Value error, ')}{more}"


def load_notify_config(home: Path) -> NotifyConfig:
    """The ``notify:`` section of ``home/config.yaml`` (none: no team targets)."""
    path = home / CONFIG_FILE
    text = read_optional_text(path, "controller config", CONFIG_FIX)
    return NotifyConfig() if text is None else parse_notify_config(text, str(path))
