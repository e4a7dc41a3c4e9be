"""An attempt's ``--time``: the time left to the job's deadline, else the cluster's default.

The deadline is resolved once, at admission (:attr:`LaunchRequest.deadline`), so every attempt asks
for what is left of it when it is launched: a retry 30 h into a 36 h deadline asks for 6 h, and an
absolute deadline (``2026-12-01T00:00Z``) counts the same way. A limit shorter than the work it should
cover (the partition's ``MaxTime`` below the time left to the deadline, or the cluster default below
``goals.compute_hours``) is said in a note: the attempt will be stopped at the limit (with the notice
``--signal`` gives) and resumed from its checkpoint by the next one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

from orchestrator.backends.base import LaunchRequest
from orchestrator.backends.slurm.config import SlurmClusterConfig
from orchestrator.spec import format_duration

_SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_UNLIMITED = frozenset({"infinite", "unlimited", "none", "n/a", ""})


@dataclass(frozen=True)
class TimeLimit:
    """The ``--time`` value, and what the user should know about it (None: nothing)."""

    value: str
    note: str | None = None


def format_time_limit(seconds: float) -> str:
    """SLURM's ``D-HH:MM:SS``, rounded up to the minute (at least one minute)."""
    minutes = max(1, math.ceil(seconds / 60))
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def slurm_time_seconds(text: str) -> float | None:
    """Seconds of a SLURM time (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``); None for ``infinite``/``UNLIMITED`` or text that is not a SLURM time."""
    text = text.strip()
    found = _SLURM_TIME.match(text)
    if text.lower() in _UNLIMITED or found is None:
        return None
    days, first, second, third = found.groups()
    parts = [int(p) for p in (first, second, third) if p is not None]
    if days is not None:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = [*parts, 0, 0][:3]
        return float(int(days) * 86400 + hours * 3600 + minutes * 60 + seconds)
    if len(parts) == 3:  # HH:MM:SS
        return float(parts[0] * 3600 + parts[1] * 60 + parts[2])
    return float(parts[0] * 60 + (parts[1] if len(parts) == 2 else 0))  # MM[:SS]


def time_limit(
    request: LaunchRequest, config: SlurmClusterConfig, now: datetime, partition_limit: str | None = None
) -> TimeLimit:
    """``--time`` for an attempt launched at ``now``; ``partition_limit``: the partition's ``MaxTime``
    as ``sinfo`` writes it (None when unknown)."""
    if request.deadline is None:
        return _cluster_default(request, config)
    left_s = max(60.0, (request.deadline - now).total_seconds())
    cap_s = slurm_time_seconds(partition_limit) if partition_limit else None
    if cap_s is None or cap_s >= left_s:
        return TimeLimit(format_time_limit(left_s))
    return TimeLimit(
        format_time_limit(cap_s),
        f"the partition's time limit ({partition_limit}) is shorter than the {format_duration(left_s)} left "
        "to the deadline: the attempt is stopped at the limit and resumes from its checkpoint on the next one",
    )


def _cluster_default(request: LaunchRequest, config: SlurmClusterConfig) -> TimeLimit:
    work_h = request.spec.goals.compute_hours
    limit_s = slurm_time_seconds(config.time_limit)
    if work_h is None or limit_s is None or limit_s >= work_h * 3600:
        return TimeLimit(config.time_limit)
    return TimeLimit(
        config.time_limit,
        f"the cluster's default time limit ({config.time_limit}, time_limit in the SLURM cluster config) is "
        f"shorter than the job's estimated work ({work_h:g} h, goals.compute_hours): the attempt is stopped "
        "at the limit and resumes from its checkpoint on the next one",
    )
