"""Replay spot availability traces against market policies, many start points at once.

The model ("Can't Be Late", NSDI'24): the job needs ``work_h`` compute hours within ``deadline_h``
of its start. Every launch (spot or on-demand, a move to another zone included) spends the
changeover, paid, without progress; the changeover is rounded up to whole ticks. Spot runs only
while its zone has capacity; losing it keeps the progress made. On-demand is always available.
Past the deadline an unfinished job is forced onto on-demand (and counted as late).

Elastic jobs (``min_nodes < max_nodes``) run spot on :func:`rescale_target` nodes, at
:func:`relative_throughput` speed, and pay ``rendezvous_h`` (paid, no progress) on each resize.
Work is measured in hours at ``max_nodes``; on-demand always runs ``max_nodes``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from orchestrator.errors import UserError
from orchestrator.policies.base import MarketPolicy
from orchestrator.policies.context import (
    Action,
    BoolArray,
    FloatArray,
    IntArray,
    MarketBatch,
    MarketLogBatch,
    RunSpread,
)
from orchestrator.policies.daily import MARKET_LOG_H, fit_daily_cycle
from orchestrator.policies.rescale import check_node_range, relative_throughput, rescale_targets
from orchestrator.policies.traces import AvailabilityTrace

_EPS = 1e-9
_WAIT, _SPOT, _ON_DEMAND = int(Action.WAIT), int(Action.SPOT), int(Action.ON_DEMAND)  # ints in the loop


@dataclass(frozen=True)
class SimJob:
    work_h: float
    deadline_h: float
    changeover_h: float
    spot_price: float
    on_demand_price: float
    min_nodes: int = 1
    max_nodes: int = 1
    scaling_efficiency: float = 0.9
    rendezvous_h: float = 0.05

    def validate(self) -> None:
        for name in ("work_h", "deadline_h", "spot_price", "on_demand_price"):
            if getattr(self, name) <= 0:
                raise UserError(f"{name} must be positive", f"give a positive {name.replace('_', ' ')}")
        if self.changeover_h < 0:
            raise UserError("changeover hours must not be negative", "give 0 or more")
        check_node_range(self.min_nodes, self.max_nodes)

    def on_demand_cost(self, tick_h: float) -> float:
        """Cost of running on-demand only: one launch, then the work."""
        return self.max_nodes * self.on_demand_price * (changeover_ticks(self, tick_h) * tick_h + self.work_h)


def changeover_ticks(job: SimJob, tick_h: float) -> int:
    return math.ceil(job.changeover_h / tick_h - _EPS) if job.changeover_h > 0 else 0


@dataclass(frozen=True)
class SimResult:
    """Per start point: cost, whether the deadline was met, hours on each market, preemptions."""

    cost_usd: FloatArray
    deadline_met: BoolArray
    spot_h: FloatArray
    on_demand_h: FloatArray
    preemptions: FloatArray


def horizon_ticks(job: SimJob, tick_h: float) -> int:
    """Ticks a start point needs in the trace: the deadline plus room to finish late on on-demand."""
    return (
        math.ceil(job.deadline_h / tick_h)
        + math.ceil(job.work_h / tick_h)
        + changeover_ticks(job, tick_h)
        + 2
    )


def start_points(trace: AvailabilityTrace, job: SimJob, count: int, seed: int) -> IntArray:
    """``count`` random start ticks (seeded) that leave the whole deadline inside the trace."""
    last = trace.ticks - math.ceil(job.deadline_h / trace.tick_h) - 1
    if last < 0:
        raise UserError(
            f"the traces cover {trace.ticks * trace.tick_h:.1f} h, "
            f"shorter than the deadline ({job.deadline_h} h)",
            "use longer traces or a shorter deadline",
        )
    rng = np.random.default_rng(seed)
    return rng.integers(0, last + 1, size=count).astype(np.int64)


def market_before(trace: AvailabilityTrace, job: SimJob, starts: IntArray, hours: float) -> MarketLogBatch:
    """What a controller watching the trace's zones would have seen in the ``hours`` before each
    start point (less where the trace begins later): the counts of :class:`ZoneHistory` and the
    share of each whole hour with spot in some zone. The trace's first tick is hour 0 of its day."""
    dt = trace.tick_h
    up: BoolArray = trace.available(job.min_nodes).T  # (ticks, zones)
    began = up & ~np.vstack([np.zeros((1, up.shape[1]), dtype=bool), up[:-1]])
    any_up: BoolArray = np.asarray(up.any(axis=1))

    def cumulative(values: np.ndarray) -> FloatArray:
        total: FloatArray = np.concatenate([np.zeros((1, *values.shape[1:])), np.cumsum(values, axis=0)])
        return total

    cum_up, cum_began, cum_any = cumulative(up), cumulative(np.asarray(began)), cumulative(any_up)
    lo = np.maximum(starts - round(hours / dt), 0)
    watched = (starts > lo)[:, None]
    # a run under way when the window opens counts as one that began in it
    runs = cum_began[starts] - cum_began[lo] + (up[lo] & ~began[lo] & watched)
    hour_of_tick = np.floor(np.arange(up.shape[0]) * dt + 1e-9).astype(np.int64)
    ticks_in_hour = np.bincount(hour_of_tick)
    # an hour no tick begins in (ticks longer than an hour): the tick that covers its middle
    covering = np.minimum(((np.arange(ticks_in_hour.size) + 0.5) / dt).astype(np.int64), up.shape[0] - 1)
    hourly = np.where(
        ticks_in_hour > 0,
        np.bincount(hour_of_tick, weights=any_up) / np.maximum(ticks_in_hour, 1),
        any_up[covering],
    )
    whole_hours = int(hours)
    start_hour = np.floor(starts * dt + 1e-9).astype(np.int64)  # its hour began before the start: left out
    index = start_hour[:, None] - whole_hours + np.arange(whole_hours)[None, :]
    seen_hours = np.where(index >= 0, hourly[np.maximum(index, 0)], np.nan)
    strength, peak = fit_daily_cycle(seen_hours, np.mod(start_hour - whole_hours, 24).astype(np.float64))
    return MarketLogBatch(
        observed_h=((starts - lo) * dt).astype(np.float64),
        any_available_h=(cum_any[starts] - cum_any[lo]) * dt,
        available_h=(cum_up[starts] - cum_up[lo]) * dt,
        up_runs=runs.astype(np.float64),
        spread=_ended_runs_between(up, lo, starts, dt),
        cycle_strength=strength,
        cycle_peak_h=peak,
        start_clock_h=np.mod(starts * dt, 24.0),
    )


def _ended_runs_between(up: BoolArray, lo: IntArray, starts: IntArray, dt: float) -> RunSpread:
    """The runs of availability that a :class:`ZoneHistory` watching ticks ``lo`` to ``starts - 1``
    saw end, per start and zone: a run ends at the first tick without spot after it, and one under
    way at ``lo`` counts from ``lo``."""
    ticks = up.shape[0]
    # per tick t: whether a run ended there (up at t - 1, down at t), and that run's length in ticks
    tick = np.arange(ticks)[:, None]
    last_down = np.maximum.accumulate(np.where(up, -1, tick), axis=0)
    run_len = np.where(up, tick - last_down, 0).astype(np.float64)  # ticks of its run so far, at an up tick
    ended = np.zeros(up.shape, dtype=bool)
    ended[1:] = up[:-1] & ~up[1:]
    length = np.zeros(up.shape)
    length[1:] = run_len[:-1]
    n_ended = np.where(ended, 1.0, 0.0)
    cum_n = np.vstack([np.zeros((1, up.shape[1])), np.cumsum(n_ended, axis=0)])
    cum_1 = np.vstack([np.zeros((1, up.shape[1])), np.cumsum(n_ended * length, axis=0)])
    cum_2 = np.vstack([np.zeros((1, up.shape[1])), np.cumsum(n_ended * length * length, axis=0)])
    # ends the history sees: ticks lo + 1 .. starts - 1
    first, last = np.minimum(lo + 1, starts), np.maximum(starts, lo + 1)
    count = cum_n[last] - cum_n[first]
    sum_1 = cum_1[last] - cum_1[first]
    sum_2 = cum_2[last] - cum_2[first]
    # the run under way at lo began before it: seen from lo only. Where it ends (the first tick
    # without spot after lo) inside the window, replace its whole length by the part seen.
    next_down = np.minimum.accumulate(np.where(up, ticks, tick)[::-1], axis=0)[::-1]
    lo_c = np.minimum(lo, ticks - 1)
    end = next_down[lo_c, :]  # (starts, zones)
    zone_idx = np.arange(up.shape[1])[None, :]
    whole = np.where(end < ticks, length[np.minimum(end, ticks - 1), zone_idx], 0.0)
    seen = (end - lo[:, None]).astype(np.float64)
    cut = up[lo_c, :] & (whole > seen) & (end <= starts[:, None] - 1) & (starts > lo)[:, None]
    sum_1 = sum_1 + np.where(cut, seen - whole, 0.0)
    sum_2 = sum_2 + np.where(cut, seen * seen - whole * whole, 0.0)
    return RunSpread(count, sum_1 * dt, sum_2 * dt * dt)


@dataclass(frozen=True)
class Launch:
    """One launch of the first start point's run: at trace tick ``tick`` (from its start)."""

    tick: int
    market: str
    zone: str | None


def simulate(
    policy: MarketPolicy,
    trace: AvailabilityTrace,
    job: SimJob,
    starts: IntArray,
    launches: list[Launch] | None = None,
    latency_h: float = 0.0,
    stop_h: float | None = None,
    market_log_h: float = MARKET_LOG_H,
) -> SimResult:
    """Run ``policy`` from every start tick in ``starts`` (vectorised over starts).

    ``launches``, when given, receives every launch of the first start point (to compare one run's
    decisions with the controller's). ``latency_h`` tells the policy how late its actions may be
    carried out, as a controller does (its tick), and ``stop_h`` how long stopping on-demand may take
    (default: ``latency_h``); the simulator still carries decisions out at once. ``market_log_h``:
    hours of the trace before each start point that the policy is given (:func:`market_before`), as
    a controller that watched the zones knows them: a week by default (the local and SLURM
    controllers keep such a log); 0: none, as the Kubernetes operator, which keeps none.
    """
    job.validate()
    dt, n, zones = trace.tick_h, len(starts), len(trace.zones)
    co = changeover_ticks(job, dt)
    rv = changeover_ticks(SimJob(1, 1, job.rendezvous_h, 1, 1), dt)
    elastic = job.min_nodes < job.max_nodes
    # pad so late finishers read "no capacity" instead of running off the trace
    pad = horizon_ticks(job, dt)
    counts = np.concatenate([trace.counts, np.zeros((zones, pad), dtype=np.int64)], axis=1).T
    rate_of = np.array(
        [
            relative_throughput(k, job.max_nodes, job.scaling_efficiency) if k else 0.0
            for k in range(job.max_nodes + 1)
        ]
    )
    work_t, deadline_t = job.work_h / dt, job.deadline_h / dt
    rows = np.arange(n)

    done = np.zeros(n)
    market = np.zeros(n, dtype=np.int64)
    zone = np.full(n, -1, dtype=np.int64)
    nodes = np.zeros(n, dtype=np.int64)
    co_left = np.zeros(n, dtype=np.int64)
    finished = np.zeros(n, dtype=bool)
    finish_t = np.full(n, np.inf)
    cost, spot_t, od_t, preempt = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    avail_h, runs, streak = np.zeros((n, zones)), np.zeros((n, zones)), np.zeros((n, zones))
    prev = np.zeros((n, zones), dtype=bool)
    spread = RunSpread(np.zeros((n, zones)), np.zeros((n, zones)), np.zeros((n, zones)))
    any_h = np.zeros(n)
    log = market_before(trace, job, starts, market_log_h) if market_log_h > 0 else None

    for tau in range(pad):
        active = ~finished
        if not active.any():
            break
        cnt = counts[starts + tau]
        up = cnt >= job.min_nodes
        # capacity lost under a running spot instance: preempted
        lost = (market == _SPOT) & ~up[rows, np.maximum(zone, 0)] & active
        preempt += lost
        market[lost], zone[lost], nodes[lost] = _WAIT, -1, 0
        avail_h += up * dt
        runs += up & ~prev
        ended = prev & ~up  # a run of availability ended: its length is the streak so far
        if ended.any():
            spread = RunSpread(
                spread.runs + ended, spread.run_h + ended * streak, spread.run_h2 + ended * streak * streak
            )
        streak = np.where(up == prev, streak + dt, dt)
        any_h += up.any(axis=1) * dt
        prev = up
        batch = MarketBatch(
            elapsed_h=np.full(n, tau * dt),
            work_done_h=done * dt,
            deadline_h=job.deadline_h,
            work_total_h=job.work_h,
            changeover_h=co * dt,
            tick_h=dt,
            spot_price=job.spot_price,
            on_demand_price=job.on_demand_price,
            market=market.copy(),
            zone=zone.copy(),
            spot_available=up,
            observed_h=np.full(n, (tau + 1) * dt),
            any_available_h=any_h,
            available_h=avail_h,
            up_runs=runs,
            streak_h=streak,
            spread=spread,
            latency_h=latency_h,
            stop_h=latency_h if stop_h is None else stop_h,
            market_log=log,
        )
        action, want_zone = policy.decide_batch(batch)
        action = np.where(tau >= deadline_t - _EPS, _ON_DEMAND, action)
        want_zone = np.where(action == _SPOT, want_zone, -1)
        bad_spot = (action == _SPOT) & ((want_zone < 0) | ~up[rows, np.maximum(want_zone, 0)])
        action = np.where(bad_spot, _WAIT, action)
        want_zone = np.where(bad_spot, -1, want_zone)
        action[~active] = _WAIT

        target = np.where(action == _ON_DEMAND, job.max_nodes, 0)
        if action.any():
            offered = cnt[rows, np.maximum(want_zone, 0)]
            spot_nodes = rescale_targets(offered, job.min_nodes, job.max_nodes)
            target = np.where(action == _SPOT, spot_nodes, target)
        launch = (action != _WAIT) & ((action != market) | (want_zone != zone))
        resize = ~launch & (action == _SPOT) & (target != nodes) & elastic
        if launches is not None and launch[0]:
            first = Action(int(action[0]))
            where = trace.zones[int(want_zone[0])] if first is Action.SPOT else None
            launches.append(Launch(tau, first.market or "", where))
        co_left = np.where(launch, co, np.where(resize, np.maximum(co_left, rv), co_left))
        market, zone, nodes = action, want_zone, np.where(action == _WAIT, 0, target)

        running = market != _WAIT
        productive = running & (co_left == 0)
        rate = rate_of[nodes] * productive
        need = np.maximum(work_t - done, 0.0)
        frac = np.where(productive & (rate >= need - _EPS), need / np.maximum(rate, _EPS), 1.0)
        frac = np.minimum(frac, 1.0)
        price = np.where(market == _SPOT, job.spot_price, job.on_demand_price)
        cost += running * price * nodes * dt * frac
        spot_t += (market == _SPOT) * frac
        od_t += (market == _ON_DEMAND) * frac
        done += rate * frac
        ends = productive & (done >= work_t - _EPS) & active
        finish_t[ends] = tau + frac[ends]
        finished |= ends
        co_left = np.where(running & (co_left > 0), co_left - 1, co_left)
        market[ends], zone[ends], nodes[ends] = _WAIT, -1, 0

    return SimResult(
        cost_usd=cost,
        deadline_met=finish_t <= deadline_t + _EPS,
        spot_h=spot_t * dt,
        on_demand_h=od_t * dt,
        preemptions=preempt,
    )
