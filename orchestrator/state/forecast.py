"""Forecasts from measured throughput and the work left: when a running job finishes and what it costs.

The rate is the steps per second between the oldest and newest step sample of the open segment (the
current world size, GPU type and market); the work left is ``total_steps - step``. The cost to finish
is the time left at the open segment's price (the current market) and at the on-demand price of the
same nodes; the projected cost adds what was spent. One function for every backend and every reader:
the controller's alerts, ``gpuctl status``, the GPUJob's status and the cost report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.state.job_state import JobState, SegmentState
from orchestrator.state.watch import WatchState

MIN_SPAN_S = 1.0
"""Samples spanning less than this say nothing about the rate yet."""


@dataclass(frozen=True)
class Forecast:
    step: int
    total_steps: int
    steps_per_second: float
    finish_at: datetime
    eta_seconds: float
    """From ``now`` (0 once the finish time has passed)."""
    hourly_usd: float
    """The open segment's nodes at the price paid now."""
    on_demand_hourly_usd: float
    cost_to_finish_usd: float
    cost_to_finish_on_demand_usd: float
    spent_usd: float
    projected_cost_usd: float
    """Spent so far plus the cost to finish at the current market."""
    deadline: datetime | None = None
    budget_usd: float | None = None

    @property
    def deadline_at_risk(self) -> bool | None:
        """The forecast finish is after the deadline (None without a deadline)."""
        return None if self.deadline is None else self.finish_at > self.deadline

    @property
    def budget_at_risk(self) -> bool | None:
        """The projected cost is above the budget (None without a budget)."""
        return None if self.budget_usd is None else self.projected_cost_usd > self.budget_usd

    def summary(self) -> str:
        """One line: ETA, cost to finish now and on-demand, and the risks."""
        eta = _duration(self.eta_seconds)
        text = (
            f"ETA {eta} (at {self.finish_at:%Y-%m-%d %H:%M} UTC, {self.steps_per_second:.3g} steps/s); "
            f"to finish {self.cost_to_finish_usd:.2f} USD at the current market, "
            f"{self.cost_to_finish_on_demand_usd:.2f} USD on-demand; projected {self.projected_cost_usd:.2f} USD"
        )
        if self.budget_at_risk:
            text += f", over the {self.budget_usd:.2f} USD budget"
        if self.deadline_at_risk:
            text += f"; finishes after the deadline {self.deadline:%Y-%m-%d %H:%M} UTC"
        return text


def forecast(
    state: JobState, now: datetime, deadline: datetime | None = None, budget_usd: float | None = None
) -> Forecast | None:
    """The forecast of a job with an open segment, a known ``total_steps`` and a measured rate; else None."""
    return forecast_from(state.watch, state.segments, now, deadline, budget_usd)


def forecast_from(
    watch: WatchState,
    segments: Sequence[SegmentState],
    now: datetime,
    deadline: datetime | None = None,
    budget_usd: float | None = None,
) -> Forecast | None:
    """:func:`forecast` from a job's step samples and segments."""
    segment = segments[-1] if segments and segments[-1].ended_at is None else None
    if segment is None or not watch.total_steps:
        return None
    samples = watch.since(segment.started_at)
    if len(samples) < 2:
        return None
    first, last = samples[0], samples[-1]
    span = (last.at - first.at).total_seconds()
    if span < MIN_SPAN_S or last.step <= first.step:
        return None
    rate = (last.step - first.step) / span
    left_s = max(0, watch.total_steps - last.step) / rate
    finish_at = last.at + timedelta(seconds=left_s)
    eta_s = max(0.0, (finish_at - now).total_seconds())
    hourly = segment.nodes * segment.placement.node_price_usd_per_hour
    on_demand_hourly = segment.nodes * segment.placement.on_demand_node_price_usd_per_hour
    spent = sum(s.cost_usd(now) for s in segments)
    to_finish = eta_s / 3600.0 * hourly
    return Forecast(
        step=last.step, total_steps=watch.total_steps, steps_per_second=rate, finish_at=finish_at,
        eta_seconds=eta_s, hourly_usd=hourly, on_demand_hourly_usd=on_demand_hourly,
        cost_to_finish_usd=to_finish, cost_to_finish_on_demand_usd=eta_s / 3600.0 * on_demand_hourly,
        spent_usd=spent, projected_cost_usd=spent + to_finish, deadline=deadline, budget_usd=budget_usd,
    )  # fmt: skip


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes >= 60:
        return f"{minutes // 60}h{minutes % 60:02d}m"
    return f"{minutes}m{int(seconds % 60):02d}s"
