"""What the controller remembers to watch a running job: recent step advances, alerts already raised,
and why a job that is not running waits.

Kept in :class:`~orchestrator.state.job_state.JobState` (so in the SQLite store locally and on SLURM, and
in the GPUJob's ``.status`` on Kubernetes): reconcile stays a pure function of the spec, this state and
the time. :func:`record_step` is what hosts call with each observed progress record (as they record
notices); the step samples give the stall watchdog its "last advanced at" and the forecasts their rate.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

IDLE_UTIL_PCT = 5.0
"""GPUs under this mean utilization are idle."""
MAX_SAMPLES = 32
"""Step samples kept: the newest advances of the current segment (a tick's worth each)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore")


class StepSample(_Model):
    """Training was at ``step`` at ``at`` (the trainer's clock, from its progress record)."""

    step: int
    at: datetime


class WatchState(_Model):
    """Step samples of the current segment and the alert episodes already raised (each alert once)."""

    samples: tuple[StepSample, ...] = ()
    """The newest step advances seen, oldest first (at most :data:`MAX_SAMPLES`)."""
    total_steps: int | None = None
    stalled_for: datetime | None = None
    """The "last step advance" whose stall was alerted (a new advance starts a new episode)."""
    idle_for: datetime | None = None
    """The "GPUs idle since" whose idleness was alerted."""
    deadline_at_risk: bool = False
    budget_at_risk: bool = False

    def since(self, start: datetime | None) -> tuple[StepSample, ...]:
        """The samples taken at or after ``start`` (the open segment's start: the current world)."""
        return tuple(s for s in self.samples if start is None or s.at >= start)

    def last_advance(self, start: datetime | None) -> datetime | None:
        samples = self.since(start)
        return samples[-1].at if samples else None

    def median_step_s(self, start: datetime | None) -> float | None:
        """Median seconds per step between consecutive samples of the current segment."""
        samples = self.since(start)
        per_step = [
            (b.at - a.at).total_seconds() / (b.step - a.step)
            for a, b in itertools.pairwise(samples)
            if b.step > a.step
        ]
        return statistics.median(per_step) if per_step else None


@dataclass(frozen=True)
class GpuActivity:
    """What the GPU monitors' windows say of the job's GPUs lately (for the idle watchdog)."""

    measured_until: datetime
    """The end of the newest window of any node."""
    busy_until: datetime | None
    """The end of the newest window whose mean utilization was at least :data:`IDLE_UTIL_PCT` (None:
    none was)."""
    util_pct: float
    """Mean utilization of the newest windows (the highest over nodes)."""


class WaitReason(_Model):
    """Why a job that is not running waits, in one line with its evidence."""

    code: str
    """What it waits for: ``pending``, ``no_spot``, ``queued``, ``unschedulable``, ``checkpoint``, ..."""
    message: str
    since: datetime


def record_step(
    watch: WatchState, step: int, total_steps: int | None, at: datetime | None, start: datetime | None
) -> WatchState:
    """``watch`` with the progress record (``step`` at ``at``) added when the step advanced in the current
    segment (which started at ``start``); samples of earlier segments are dropped."""
    if at is None or (start is not None and at < start):
        return watch
    samples = watch.since(start)
    last = samples[-1] if samples else None
    if last is not None and (step == last.step or at <= last.at):
        if samples == watch.samples and total_steps in (None, watch.total_steps):
            return watch
        return watch.model_copy(update={"samples": samples, "total_steps": total_steps or watch.total_steps})
    kept = (*samples, StepSample(step=step, at=at))[-MAX_SAMPLES:]
    return watch.model_copy(update={"samples": kept, "total_steps": total_steps or watch.total_steps})
