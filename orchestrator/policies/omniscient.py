"""The omniscient optimum: the cheapest schedule that meets the deadline, knowing the whole trace.

A lower bound for every policy, computed by dynamic programming over trace ticks in the simulator's
model (same changeover rounding, same partial last tick). Vectorised over start points.

State at tick t (relative to the start): ``lost`` = t - work done (ticks spent without progress,
at most the slack) and the mode: free (nothing warm), warm on-demand, or warm spot in zone z.
A launch is one step of ``changeover`` ticks, allowed for spot only if the zone has capacity all
along (a launch that is lost half-way is never better than waiting).
"""

from __future__ import annotations

import math

import numpy as np

from orchestrator.policies.context import IntArray
from orchestrator.policies.simulator import SimJob, SimResult, changeover_ticks
from orchestrator.policies.traces import AvailabilityTrace

_EPS = 1e-9


def _windows(up: np.ndarray, length: int) -> np.ndarray:
    """(Z, T) whether the zone is up at every tick of [t, t + length)."""
    if length <= 0:
        return np.ones_like(up, dtype=bool)
    csum = np.concatenate([np.zeros((up.shape[0], 1), dtype=np.int64), np.cumsum(up, axis=1)], axis=1)
    out = np.zeros_like(up, dtype=bool)
    span = up.shape[1] - length + 1
    if span > 0:
        out[:, :span] = (csum[:, length:] - csum[:, :span]) == length
    return out


def omniscient(trace: AvailabilityTrace, job: SimJob, starts: IntArray) -> SimResult:
    """Optimal cost per start (fixed-size job: spot needs ``max_nodes`` available)."""
    dt = trace.tick_h
    zones = len(trace.zones)
    n = len(starts)
    co = changeover_ticks(job, dt)
    work_t, deadline_t = job.work_h / dt, job.deadline_h / dt
    w_last = math.ceil(work_t - _EPS) - 1  # work ticks done before the (partial) last tick
    f_last = work_t - w_last
    slack = math.floor(deadline_t - work_t + _EPS)
    inf = np.inf
    if slack < co:  # not even on-demand makes it
        nan = np.full(n, np.nan)
        return SimResult(np.full(n, inf), np.zeros(n, dtype=bool), nan, nan, nan)

    up_full = trace.available(job.max_nodes)
    pad = np.zeros((zones, w_last + slack + co + 2), dtype=bool)
    up_all = np.concatenate([up_full, pad], axis=1)
    win_all = _windows(up_all, co)
    k = job.max_nodes
    # mode 0 = on-demand, mode 1 + z = spot in zone z; prices per tick
    tick_price = (np.array([job.on_demand_price] + [job.spot_price] * zones) * dt * k).astype(np.float32)
    launch_price = (co * tick_price)[:, None, None]
    run_price = tick_price[:, None, None]
    modes, size = zones + 1, slack + 1
    warm = np.full((modes, n, size), inf, dtype=np.float32)
    free = np.full((n, size), inf, dtype=np.float32)
    free[:, 0] = 0.0
    ring = co + 1
    arr = np.full((ring, modes, n, size), inf, dtype=np.float32)
    best = np.full(n, inf, dtype=np.float32)
    always = np.ones((1, n), dtype=bool)

    # in place: the arrays are (modes, starts, slack) at every tick, the loop runs every tick
    mins = np.empty((n, size), dtype=np.float32)
    landings = co > 0 and size > co
    # a slot is written again by the next tick's launches (from co on): only the rest needs clearing
    cleared = co if landings else size
    for tau in range(w_last + slack + 1):
        down = np.nonzero(~np.concatenate([always, up_all[:, starts + tau]]))  # (mode, start) pairs
        slot = tau % ring
        w = warm
        if co > 0:
            np.minimum(w, arr[slot], out=w)
        arr[slot, :, :, :cleared].fill(inf)
        if co == 0:  # a launch is instant: free states may become warm where the zone is up
            np.minimum(w, free[None], out=w)
        # anything warm may stop (or lose its spot): it becomes free at the same lost time
        np.minimum(free, w.min(axis=0, out=mins), out=free)
        w[down] = inf
        lost = tau - w_last
        if 0 <= lost < size:  # warm with w_last ticks of work done: one last partial tick
            best = np.minimum(best, (w[:, :, lost] + f_last * tick_price[:, None]).min(axis=0))
        if landings:  # launches land warm co ticks later, co ticks more lost
            closed = np.nonzero(~np.concatenate([always, win_all[:, starts + tau]]))
            landing = arr[(tau + co) % ring, :, :, co:]
            np.add(free[None, :, : size - co], launch_price, out=landing)
            landing[closed] = inf
        np.add(w, run_price, out=w)
        warm = w
        free[:, 1:] = free[:, :-1].copy()
        free[:, 0] = inf
    best64 = best.astype(np.float64)
    nan = np.full(n, np.nan)
    return SimResult(
        cost_usd=best64,
        deadline_met=np.isfinite(best64),
        spot_h=nan,
        on_demand_h=nan,
        preemptions=nan,
    )
