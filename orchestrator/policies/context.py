"""What a market policy knows when it decides, and what it answers.

A decision is made at each reconcile tick (controller) or trace tick (simulator) from facts known
*now*: the job's clock and progress, prices, the changeover cost, which zones offer spot capacity at
this moment, and what was seen of each zone so far. Never the future.

Two forms of the same facts:

* :class:`MarketContext` — one job, plain Python values; what the controller builds.
* :class:`MarketBatch` — many independent jobs as numpy arrays (one row per job); what the simulator
  builds. Policies implement their logic once, on the batch form; ``decide`` wraps one context into a
  batch of one, so the controller and ``gpuctl simulate`` run the very same code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
from numpy.typing import NDArray

from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import UserError
from orchestrator.policies.daily import fit_daily_cycle

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


class Action(IntEnum):
    """What to run next. Codes are stored in numpy arrays by the batch form."""

    WAIT = 0
    SPOT = 1
    ON_DEMAND = 2

    @property
    def market(self) -> MarketKind | None:
        return {Action.WAIT: None, Action.SPOT: MarketKind.SPOT, Action.ON_DEMAND: MarketKind.ON_DEMAND}[self]


_SPOT = int(Action.SPOT)  # a plain int where every row of every tick compares with it


def action_from_market(market: MarketKind | None) -> Action:
    if market is None:
        return Action.WAIT
    try:
        kind = MarketKind(market)  # a plain "spot" too, as callers outside gpuctl may pass
    except ValueError:
        raise UserError(f"unknown market '{market}'", "use 'spot', 'on-demand' or None") from None
    return Action.SPOT if kind is MarketKind.SPOT else Action.ON_DEMAND


@dataclass(frozen=True)
class ZoneHistory:
    """Spot availability seen so far (since the job was submitted), per zone.

    ``observed_h``: hours watched; ``available_h[z]``: hours zone z had capacity;
    ``any_available_h``: hours at least one zone had capacity; ``up_runs[z]``: how many periods of
    availability began in z; ``streak_h[z]``: length of z's current run (of availability if it is
    available now, of unavailability otherwise); ``ended_runs[z]``, ``ended_run_h[z]``,
    ``ended_run_h2[z]``: how many of z's runs of availability have ended, the sum of their lengths
    and of their squared lengths (hours; the spread of its run lengths: see
    :func:`orchestrator.policies.guard.run_spread`). Build it with :meth:`empty` then
    :meth:`updated` once per tick.
    """

    observed_h: float = 0.0
    any_available_h: float = 0.0
    available_h: Mapping[str, float] = field(default_factory=dict)
    up_runs: Mapping[str, int] = field(default_factory=dict)
    streak_h: Mapping[str, float] = field(default_factory=dict)
    last_available: Mapping[str, bool] = field(default_factory=dict)
    ended_runs: Mapping[str, int] = field(default_factory=dict)
    ended_run_h: Mapping[str, float] = field(default_factory=dict)
    ended_run_h2: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> ZoneHistory:
        return cls()

    def updated(self, tick_h: float, available: Mapping[str, bool]) -> ZoneHistory:
        """The history after watching ``available`` for ``tick_h`` more hours."""
        avail_h = dict(self.available_h)
        runs = dict(self.up_runs)
        streak = dict(self.streak_h)
        ended, ended_h, ended_h2 = dict(self.ended_runs), dict(self.ended_run_h), dict(self.ended_run_h2)
        now_up = {zone: bool(up) for zone, up in available.items()}
        for zone, now in now_up.items():
            before = self.last_available.get(zone)
            avail_h[zone] = avail_h.get(zone, 0.0) + (tick_h if now else 0.0)
            if now and before is not True:
                runs[zone] = runs.get(zone, 0) + 1
            if before is True and not now:  # a run of availability ended: its length is the streak
                length = streak.get(zone, 0.0)
                ended[zone] = ended.get(zone, 0) + 1
                ended_h[zone] = ended_h.get(zone, 0.0) + length
                ended_h2[zone] = ended_h2.get(zone, 0.0) + length * length
            streak[zone] = streak.get(zone, 0.0) + tick_h if before is now else tick_h
        return ZoneHistory(
            observed_h=self.observed_h + tick_h,
            any_available_h=self.any_available_h + (tick_h if any(now_up.values()) else 0.0),
            available_h=avail_h,
            up_runs=runs,
            streak_h=streak,
            last_available=now_up,
            ended_runs=ended,
            ended_run_h=ended_h,
            ended_run_h2=ended_h2,
        )


@dataclass(frozen=True)
class MarketLog:
    """The market seen before the job: what a controller that watched the zones knows at the
    job's start (the simulator: the trace before the start point).

    ``history``: the same counts as the job's own :class:`ZoneHistory`, over those hours;
    ``hourly_any_up``: the share of each hour in which some allowed zone had spot, oldest first, the
    last hour ending at the job's start, NaN for an hour nobody watched; ``start_clock_h``: the hour
    of the day (UTC, 0 to 24) at the job's start. plan-ahead uses it when its days agree on a daily
    cycle (:mod:`orchestrator.policies.daily`).
    """

    history: ZoneHistory
    hourly_any_up: tuple[float, ...]
    start_clock_h: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON document (kept with the job: the same log after a controller restart)."""
        h = self.history
        return {
            "history": {"observed_h": h.observed_h, "any_available_h": h.any_available_h,
                        "available_h": dict(h.available_h), "up_runs": dict(h.up_runs),
                        "ended_runs": dict(h.ended_runs), "ended_run_h": dict(h.ended_run_h),
                        "ended_run_h2": dict(h.ended_run_h2)},
            "hourly_any_up": [None if math.isnan(v) else v for v in self.hourly_any_up],
            "start_clock_h": self.start_clock_h,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> MarketLog:
        h = doc["history"]
        history = ZoneHistory(
            observed_h=float(h["observed_h"]),
            any_available_h=float(h["any_available_h"]),
            available_h={str(z): float(v) for z, v in h["available_h"].items()},
            up_runs={str(z): int(v) for z, v in h["up_runs"].items()},
            # absent from logs kept before the spread was: no ended runs seen
            ended_runs={str(z): int(v) for z, v in h.get("ended_runs", {}).items()},
            ended_run_h={str(z): float(v) for z, v in h.get("ended_run_h", {}).items()},
            ended_run_h2={str(z): float(v) for z, v in h.get("ended_run_h2", {}).items()},
        )
        hourly = tuple(math.nan if v is None else float(v) for v in doc["hourly_any_up"])
        return cls(history, hourly, float(doc["start_clock_h"]))

    def to_batch(self, zones: Sequence[str]) -> MarketLogBatch:
        h = self.history
        hourly = np.asarray([self.hourly_any_up], dtype=np.float64).reshape(1, -1)
        first = np.array([(self.start_clock_h - hourly.shape[1]) % 24.0])
        strength, peak = fit_daily_cycle(hourly, first)
        return MarketLogBatch(
            observed_h=np.array([h.observed_h]),
            any_available_h=np.array([h.any_available_h]),
            available_h=np.asarray([[h.available_h.get(z, 0.0) for z in zones]], dtype=np.float64),
            up_runs=np.asarray([[float(h.up_runs.get(z, 0)) for z in zones]], dtype=np.float64),
            spread=RunSpread.of(h, zones),
            cycle_strength=strength,
            cycle_peak_h=peak,
            start_clock_h=np.array([self.start_clock_h % 24.0]),
        )


@dataclass
class RunSpread:
    """The ended runs of availability of B jobs' zones, (B, Z) each: how many, the sum of their
    lengths and of their squared lengths (hours) (:class:`ZoneHistory`'s ``ended_run*``)."""

    runs: FloatArray
    run_h: FloatArray
    run_h2: FloatArray

    @classmethod
    def of(cls, h: ZoneHistory, zones: Sequence[str]) -> RunSpread:
        def row(values: Mapping[str, float] | Mapping[str, int]) -> FloatArray:
            return np.asarray([[float(values.get(z, 0.0)) for z in zones]], dtype=np.float64)

        return cls(row(h.ended_runs), row(h.ended_run_h), row(h.ended_run_h2))

    def __add__(self, other: RunSpread) -> RunSpread:
        return RunSpread(self.runs + other.runs, self.run_h + other.run_h, self.run_h2 + other.run_h2)


@dataclass
class MarketLogBatch:
    """:class:`MarketLog` for B jobs: the counts of the hours before each job ((B,) or (B, Z)),
    the spread of its ended runs, the daily cycle fitted to them (strength 0: none, the days did not
    agree) and the hour of the day at each job's start."""

    observed_h: FloatArray
    any_available_h: FloatArray
    available_h: FloatArray
    up_runs: FloatArray
    spread: RunSpread
    cycle_strength: FloatArray
    cycle_peak_h: FloatArray
    start_clock_h: FloatArray


@dataclass(frozen=True)
class MarketContext:
    """Everything known about one job at decision time.

    Times are hours. ``elapsed_h``: since the job started (submit time); ``deadline_h``: the deadline
    measured from the same start; ``work_done_h``/``work_total_h``: compute hours done and needed
    (progress fraction x compute hours); ``changeover_h``: time a launch spends paid but without
    progress (start-up plus work lost since the last checkpoint); ``tick_h``: time until the next
    decision. ``zones`` lists allowed zones in preference order; ``current_market`` is 'spot',
    'on-demand' or None (nothing running), ``current_zone`` its zone. ``spot_available[z]`` says
    whether z has spot capacity now. ``latency_h``: how late an action may be carried out after it is
    decided (a controller acts at its next pass: about a tick; the simulator acts at once: 0).
    ``stop_h``: how long stopping an on-demand run may take before the job can be placed again (a
    controller: the notice grace and a pass; the simulator: its latency). ``market_log``: the
    market seen before the job, when the caller kept one (see :class:`MarketLog`). ``try_cost_h``:
    what a spot launch that finds no capacity costs before the job can be placed again, where a
    zone's spot is seen only by trying it (Kubernetes: ``spotShortageAfterSeconds``); 0 where
    capacity is seen before launching (local, SLURM, the simulator).
    """

    elapsed_h: float
    deadline_h: float
    work_done_h: float
    work_total_h: float
    changeover_h: float
    tick_h: float
    spot_price: float
    on_demand_price: float
    zones: Sequence[str]
    spot_available: Mapping[str, bool]
    current_market: MarketKind | None = None
    current_zone: str | None = None
    history: ZoneHistory = field(default_factory=ZoneHistory.empty)
    latency_h: float = 0.0
    stop_h: float = 0.0
    market_log: MarketLog | None = None
    try_cost_h: float = 0.0

    def to_batch(self) -> MarketBatch:
        zones = list(self.zones)
        if not zones:
            raise UserError("market context lists no zones", "give at least one allowed zone")
        h = self.history
        zone_index = zones.index(self.current_zone) if self.current_zone in zones else -1

        def row(values: Sequence[float]) -> FloatArray:
            return np.asarray([values], dtype=np.float64)

        return MarketBatch(
            elapsed_h=np.array([self.elapsed_h]),
            work_done_h=np.array([self.work_done_h]),
            deadline_h=self.deadline_h,
            work_total_h=self.work_total_h,
            changeover_h=self.changeover_h,
            tick_h=self.tick_h,
            spot_price=self.spot_price,
            on_demand_price=self.on_demand_price,
            market=np.array([action_from_market(self.current_market)], dtype=np.int64),
            zone=np.array([zone_index], dtype=np.int64),
            spot_available=np.array([[bool(self.spot_available.get(z, False)) for z in zones]]),
            observed_h=np.array([h.observed_h]),
            any_available_h=np.array([h.any_available_h]),
            available_h=row([h.available_h.get(z, 0.0) for z in zones]),
            up_runs=row([float(h.up_runs.get(z, 0)) for z in zones]),
            streak_h=row([h.streak_h.get(z, 0.0) for z in zones]),
            spread=RunSpread.of(h, zones),
            latency_h=self.latency_h,
            stop_h=self.stop_h,
            market_log=None if self.market_log is None else self.market_log.to_batch(zones),
            try_cost_h=self.try_cost_h,
        )


@dataclass(frozen=True)
class MarketDecision:
    """``market``: 'spot', 'on-demand' or None (wait, run nothing); ``zone`` for spot, else None."""

    market: MarketKind | None
    zone: str | None
    policy: str


@dataclass
class MarketBatch:
    """:class:`MarketContext` for B jobs at once: arrays of shape (B,) or (B, Z); scalars are shared.

    ``market`` holds :class:`Action` codes of what runs now (WAIT = nothing), ``zone`` its zone index
    (-1 for none). ``spread``: the job's ended runs (:class:`RunSpread`; None: none kept).
    ``latency_h``, ``stop_h``, ``market_log``, ``try_cost_h``: see :class:`MarketContext`.
    """

    elapsed_h: FloatArray
    work_done_h: FloatArray
    deadline_h: float
    work_total_h: float
    changeover_h: float
    tick_h: float
    spot_price: float
    on_demand_price: float
    market: IntArray
    zone: IntArray
    spot_available: BoolArray
    observed_h: FloatArray
    any_available_h: FloatArray
    available_h: FloatArray
    up_runs: FloatArray
    streak_h: FloatArray
    spread: RunSpread | None = None
    latency_h: float = 0.0
    stop_h: float = 0.0
    market_log: MarketLogBatch | None = None
    try_cost_h: float = 0.0

    @property
    def slack_h(self) -> FloatArray:
        """Time left minus work left: how much more the job may wait or lose and still finish."""
        return (self.deadline_h - self.elapsed_h) - (self.work_total_h - self.work_done_h)

    @property
    def time_left_h(self) -> FloatArray:
        return self.deadline_h - self.elapsed_h

    @property
    def safety_h(self) -> float:
        """Slack needed to survive one more launch and then one fallback launch to on-demand."""
        return 2.0 * self.changeover_h + self.tick_h

    @property
    def try_safety_h(self) -> float:
        """Slack a spot launch needs: a failed try (``try_cost_h``) must leave the job at or above the
        safety net, from where on-demand still meets the deadline."""
        return self.safety_h + self.try_cost_h

    def on_spot_and_up(self) -> BoolArray:
        """Rows now running spot in a zone that still has capacity."""
        rows = np.arange(self.market.shape[0])
        zone = np.maximum(self.zone, 0)
        riding: BoolArray = (self.market == _SPOT) & (self.zone >= 0) & self.spot_available[rows, zone]
        return riding
