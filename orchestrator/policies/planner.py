"""Plan the rest of a job against a learned model of the spot market: a dynamic program.

The market model, per job (all zones together), in continuous time:

* riding spot, the zone is lost at rate ``ride_loss`` per hour; when it is lost, another zone has
  spot with probability ``failover`` (the job becomes idle with the market up), else none has;
* idle or on on-demand, "some zone has spot" is a two-state Markov process: it goes away at rate
  ``up_loss`` and comes back at rate ``recovery`` per hour.

The program runs over a grid of ``step_h`` hours: the state is (time left, slack = time left - work
left, mode, market up/down) with modes idle, warm on-demand and riding spot. Every launch costs the
changeover, paid, without progress; a launch from idle lands ``latency`` later still (a controller
carries a decision out at its next pass, up to a tick late; the simulator at once: no latency), one
from on-demand ``stop`` later again (on-demand stops, and the job is placed again from idle). Leaving
on-demand must leave the job above the safety net once it has stopped (else, idle and under the net,
it would go back to on-demand: a changeover for nothing), so on on-demand the net reaches ``stop``
higher, and waiting from on-demand reaches the idle job ``stop`` later (not a step: else the plan
could dodge the stop by waiting a step, then launching spot from idle). So in a controller the plan
goes on-demand early enough to leave it again even when every step lands late.
Slack below zero is a missed deadline (a large penalty). The answer is a table of the cheapest
action (an :class:`Action` code) for each (time left, slack) and each of four situations: idle or on
on-demand, with the market up or down (riding spot in a zone that is up continues: the policy leaves
such a zone only when an elastic ride has run its slack down, outside this plan).

A market with a daily cycle (:class:`DailyCycle`): the rates then depend on the hour of the day,
so a step's transitions depend on how far it lies before the deadline; the rest is the same program.

Tables depend only on the job's grid, the (binned) model parameters and the (binned) cycle, so they
are cached: the simulator's many start points share them, and a restarted controller recomputes the
same ones.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from orchestrator.policies.context import Action, FloatArray, IntArray

IDLE_UP, IDLE_DOWN, OD_UP, OD_DOWN = 0, 1, 2, 3
_SPOT, _ON_DEMAND = int(Action.SPOT), int(Action.ON_DEMAND)  # plain ints in the hot loop
_PENALTY = 1e9
_MAX_TIME_STEPS = 400
_MAX_SLACK_STEPS = 256
# hard bounds (a table is time x slack x 4 bytes): beyond them slack counts as the most planned for
_MOST_TIME_STEPS = 2000
_MOST_SLACK_STEPS = 512


@dataclass(frozen=True)
class PlanGrid:
    """The job's planning grid: ``step_h`` hours per step, changeover in steps (at least one)."""

    step_h: float
    time_steps: int
    slack_steps: int
    changeover_steps: float
    spot_price: float
    on_demand_price: float
    safety_steps: float = 0.0
    """Slack (in steps) under which the policy's safety net sends an idle or on-demand job to (or keeps
    it on) on-demand: the plan knows it cannot leave on-demand or wait there."""
    latency_steps: float = 0.0
    """Steps by which an action may be carried out late (a controller's pass: a tick; 0 in the
    simulator, which carries decisions out at once): a launch costs ``changeover_steps`` and lands
    ``changeover_steps + latency_steps`` later from idle, ``changeover_steps + latency_steps +
    stop_steps`` from on-demand (the stop, then the launch; the wait unpaid)."""
    stop_steps: float = 0.0
    """Steps stopping an on-demand run may take before the job is placed again (a controller: the
    notice grace and a pass; the simulator: its latency). On on-demand the safety net reaches this
    much higher: a job leaves on-demand only if it is still above the net once stopped."""

    @classmethod
    def for_job(
        cls,
        deadline_h: float,
        work_h: float,
        changeover_h: float,
        tick_h: float,
        spot: float,
        od: float,
        latency_h: float = 0.0,
        stop_h: float = 0.0,
    ) -> PlanGrid:
        slack_h = max(deadline_h - work_h, 0.0)
        coarse = max(deadline_h / _MAX_TIME_STEPS, slack_h / _MAX_SLACK_STEPS)
        # never coarser than the changeover (a launch takes at least one step), never finer than a tick
        step = max(tick_h, min(coarse, changeover_h)) if changeover_h > 0 else max(tick_h, coarse)
        step = max(step, deadline_h / _MOST_TIME_STEPS)  # long jobs: bounded work and memory
        step = float(np.float32(step))  # a stable cache key
        return cls(
            step_h=step,
            time_steps=math.ceil(deadline_h / step - 1e-9) + 1,
            slack_steps=min(math.ceil(slack_h / step - 1e-9) + 1, _MOST_SLACK_STEPS),
            changeover_steps=max(changeover_h / step, 1.0),
            spot_price=spot,
            on_demand_price=od,
            safety_steps=_sixteenths((2.0 * changeover_h + tick_h) / step),
            latency_steps=_sixteenths(latency_h / step),
            stop_steps=_sixteenths(stop_h / step),
        )


def _sixteenths(steps: float) -> float:
    """``steps`` rounded up to a sixteenth: a controller's pass lasts a little more or less each time,
    and a grid that changed with it would be planned again at every pass (tens of ms a job). Up, so
    that the plan never counts on less latency or slack than there is; a whole number of steps, the
    net's edge in the table, stays the same."""
    return math.ceil(steps * 16.0 - 1e-6) / 16.0


@dataclass(frozen=True)
class MarketModel:
    """Rates per hour (see the module doc) and the failover probability."""

    ride_loss: float
    failover: float
    up_loss: float
    recovery: float


@dataclass(frozen=True)
class DailyCycle:
    """Spot's daily cycle as the plan sees it. At hour ``h`` of the day the rate at which spot comes
    back is the learned one x m(h) / I0(strength), the rates at which it goes away are divided by
    m(h) x I0(strength), with m(h) = exp(strength x cos(2 pi (h - peak) / 24)): over a day each rate
    averages to the learned one, and the odds of spot vary by exp(2 x strength x cos(...)).
    ``deadline_after_peak_h``: hours from the cycle's peak (the hour with most spot) to the deadline,
    modulo 24; the plan runs backwards from the deadline, so that is all it needs of the clock."""

    strength: float
    deadline_after_peak_h: float

    def factors(self, hours_before_deadline: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(multiplier of the recovery rate, multiplier of the loss rates) at those hours."""
        angle = 2.0 * math.pi * (self.deadline_after_peak_h - hours_before_deadline) / 24.0
        m = np.exp(self.strength * np.cos(angle))
        i0 = float(np.i0(self.strength))
        return m / i0, 1.0 / (m * i0)


def _two_state(up_loss: float, recovery: float, hours: float) -> tuple[float, float]:
    """P(up after ``hours`` | up now), P(up after ``hours`` | down now)."""
    total = up_loss + recovery
    if total <= 0:
        return 1.0, 0.0
    decay = math.exp(-total * hours)
    return (recovery + up_loss * decay) / total, recovery * (1.0 - decay) / total


def _two_state_array(
    up_loss: FloatArray, recovery: FloatArray, hours: float
) -> tuple[FloatArray, FloatArray]:
    """:func:`_two_state` for arrays of rates (all positive)."""
    total = up_loss + recovery
    decay = np.exp(-total * hours)
    return (recovery + up_loss * decay) / total, recovery * (1.0 - decay) / total


@dataclass(frozen=True)
class _Transitions:
    """Per step of time left (axis 0; length 1 when the market has no cycle) and model (axis 1): the
    chances the plan needs, as (steps, models, 1) arrays."""

    uu: FloatArray  # up after a step, up now
    du: FloatArray  # up after a step, down now
    cuu: FloatArray  # the same after a launch from idle
    cdu: FloatArray
    suu: FloatArray  # the same after a stop of on-demand
    sdu: FloatArray
    surv: FloatArray  # a spot ride survives a step
    surv_idle: FloatArray  # ... a launch from idle
    surv_od: FloatArray  # ... a launch from on-demand


def _transitions(
    models: list[MarketModel],
    grid: PlanGrid,
    spans: tuple[float, float, float, float],
    cycles: Sequence[DailyCycle] | None,
) -> _Transitions:
    """Chances over a step, a launch from idle, a stop and a launch from on-demand (``spans``, in
    steps); ``cycles``: each model's daily cycle, or None for none."""
    dt = grid.step_h
    step, c_idle, stop, c_od = spans
    if cycles is None:  # one set for every step (scalar math: the tables of a market without a cycle)

        def col(values: list[float]) -> FloatArray:
            return np.asarray(values, dtype=np.float64)[None, :, None]

        pairs = [[_two_state(m.up_loss, m.recovery, n * dt) for m in models] for n in (step, c_idle, stop)]
        surv = [col([math.exp(-m.ride_loss * n * dt) for m in models]) for n in (step, c_idle, c_od)]
        up = [(col([p[0] for p in ps]), col([p[1] for p in ps])) for ps in pairs]
        return _Transitions(*up[0], *up[1], *up[2], *surv)
    # the rates of the step that starts tau steps before the deadline: those of its middle
    hours_before = (np.arange(grid.time_steps) - 0.5).clip(0.0) * dt
    factors = [cycle.factors(hours_before) for cycle in cycles]
    rec_f = np.stack([f[0] for f in factors], axis=1)  # (steps, models)
    loss_f = np.stack([f[1] for f in factors], axis=1)
    up_loss = np.asarray([m.up_loss for m in models])[None, :] * loss_f
    recovery = np.asarray([m.recovery for m in models])[None, :] * rec_f
    ride_loss = np.asarray([m.ride_loss for m in models])[None, :] * loss_f
    out: list[FloatArray] = []
    for n in (step, c_idle, stop):
        out.extend(p[..., None] for p in _two_state_array(up_loss, recovery, n * dt))
    out.extend(np.exp(-ride_loss * n * dt)[..., None] for n in (step, c_idle, c_od))
    return _Transitions(*out)


def plan(
    grid: PlanGrid, models: list[MarketModel], cycle: DailyCycle | Sequence[DailyCycle] | None = None
) -> NDArray[np.int8]:
    """(len(models), time_steps, slack_steps, 4): the cheapest action per model, time left, slack and
    situation (an :class:`Action` code). Vectorised over models and slack, one step of time left at a
    time (each step reads the last ``changeover + latency + stop + 1`` ones). With a ``cycle`` (one
    for all models, or one per model), each step's transitions use the rates of its hour of the day."""
    n_t, n_s, dt, k = grid.time_steps, grid.slack_steps, grid.step_h, len(models)
    ps, po = grid.spot_price * dt, grid.on_demand_price * dt
    c = grid.changeover_steps  # paid
    # A launch or stop that lands more slack steps later than the table holds lands below slack 0
    # whatever the slack: a missed deadline. So the distances are capped there, which bounds the
    # memory (a ring of that many steps) whatever the spec's changeover and notice grace.
    most = float(n_s)
    c_idle = min(c + grid.latency_steps, most)  # from idle, until the launch has landed
    c_od = min(c_idle + grid.stop_steps, most)  # from on-demand: stopping it, then a launch from idle
    stop = min(grid.stop_steps, most)
    c_lo = math.floor(c_od)

    cycles = [cycle] * k if isinstance(cycle, DailyCycle) else None if cycle is None else list(cycle)
    chances = _transitions(models, grid, (1.0, c_idle, stop, c_od), cycles)
    # waiting from on-demand: the job is idle once stopped (never sooner than the next step)
    slow_stop = stop > 1.0
    q = np.asarray([m.failover for m in models], dtype=np.float64)[:, None]
    pad = c_lo + 1  # columns of penalty left of slack 0, so that shifts are slices
    ring = c_lo + 2
    values = np.full((ring, 5, k, pad + n_s), _PENALTY)  # per step: IU, ID, OU, OD, R
    actions = np.zeros((k, n_t, n_s, 4), dtype=np.int8)
    # the safety net decides there: on-demand; on on-demand also where the job, once stopped, would be
    netted = np.arange(n_s) < grid.safety_steps - 1e-6
    netted_od = np.arange(n_s) < grid.safety_steps + grid.stop_steps - 1e-6

    def at(v: FloatArray, shift: int) -> FloatArray:
        return v[..., pad - shift : pad - shift + n_s]

    def landed(tau: int, after: float) -> FloatArray:
        """Values ``after`` steps of slack and time later, work left the same (a launch), between
        two whole steps."""
        lo = math.floor(after)
        frac = after - lo
        if frac == 0.0:  # on a whole step (the same values as the blend below: they are finite)
            return at(values[(tau - lo) % ring], lo)
        return (1.0 - frac) * at(values[(tau - lo) % ring], lo) + frac * at(
            values[(tau - lo - 1) % ring], lo + 1
        )

    per_step = chances.uu.shape[0] > 1
    fields = [getattr(chances, f) for f in chances.__dataclass_fields__]
    # no stop to wait for: a launch from on-demand is one from idle (the same chances and values)
    same_launch = c_od == c_idle
    n_net, n_net_od = int(np.count_nonzero(netted)), int(np.count_nonzero(netted_od))
    for tau in range(n_t):
        uu, du, cuu, cdu, suu, sdu, surv, surv_idle, surv_od = (f[tau if per_step else 0] for f in fields)
        prev = values[(tau - 1) % ring]
        iu1, id1, ou1, od1, r1 = at(prev, 0)
        w_iu, w_id = at(prev[0], 1), at(prev[1], 1)
        l_iu, l_id, l_ou, l_od, l_r = landed(tau, c_idle)
        spot_launch = c * ps + surv_idle * l_r + (1.0 - surv_idle) * (q * l_iu + (1.0 - q) * l_id)
        if same_launch:
            spot_from_od = spot_launch
        else:
            m_iu, m_id, _, _, m_r = landed(tau, c_od)
            spot_from_od = c * ps + surv_od * m_r + (1.0 - surv_od) * (q * m_iu + (1.0 - q) * m_id)
        wait_up = uu * w_iu + (1.0 - uu) * w_id
        wait_down = du * w_iu + (1.0 - du) * w_id
        stop_up, stop_down = wait_up, wait_down
        if slow_stop:
            s_iu, s_id = landed(tau, stop)[:2]
            stop_up, stop_down = suu * s_iu + (1.0 - suu) * s_id, sdu * s_iu + (1.0 - sdu) * s_id
        cur = values[tau % ring]
        situations = (
            (wait_up, spot_launch, c * po + cuu * l_ou + (1.0 - cuu) * l_od),  # idle, market up
            (wait_down, None, c * po + cdu * l_ou + (1.0 - cdu) * l_od),  # idle, market down
            (stop_up, spot_from_od, po + uu * ou1 + (1.0 - uu) * od1),  # on-demand, market up
            (stop_down, None, po + du * ou1 + (1.0 - du) * od1),  # on-demand, market down
        )
        for i, (wait, spot, od) in enumerate(situations):
            actions[:, tau, :, i] = _cheapest(wait, spot, od, cur[i, :, pad:])
            net = n_net_od if i >= OD_UP else n_net
            actions[:, tau, :net, i] = _ON_DEMAND
            cur[i, :, pad : pad + net] = od[:, :net]
        cur[4, :, pad:] = ps + surv * r1 + (1.0 - surv) * (q * iu1 + (1.0 - q) * id1)
        body = cur[:, :, pad:]
        body[:, :, tau:] = 0.0  # no work left: slack at least the time left
        np.minimum(body, _PENALTY, out=body)
    return actions


def _cheapest(
    wait: FloatArray, spot: FloatArray | None, od: FloatArray, best: FloatArray
) -> NDArray[np.int8]:
    """The cheapest action's code, ties to the first of wait, spot, on-demand (codes 0, 1, 2); its
    value goes to ``best``."""
    if spot is None:
        np.minimum(wait, od, out=best)
        act: NDArray[np.int8] = np.where(od < wait, np.int8(_ON_DEMAND), np.int8(0))
        return act
    first = np.minimum(wait, spot)
    np.minimum(first, od, out=best)
    act = np.where(od < first, np.int8(_ON_DEMAND), (spot < wait).view(np.int8) * np.int8(_SPOT))
    return act


_LOSS_BINS = 2.0 ** np.arange(-9.0, 4.01, 1.0)  # rates per hour: one event in 512 h to in 4 min
_FAILOVER_BINS = np.array([0.0, 0.4, 0.7, 0.9, 0.97])


def _loss_bin(rates: FloatArray) -> IntArray:
    """Nearest bin of a rate on the log2 grid of :data:`_LOSS_BINS`."""
    idx = np.rint(np.log2(np.maximum(rates, 1e-12)) - math.log2(float(_LOSS_BINS[0])))
    return np.clip(idx, 0, len(_LOSS_BINS) - 1).astype(np.int64)


def _failover_bin(chance: FloatArray) -> IntArray:
    nearest: IntArray = np.argmin(np.abs(chance[:, None] - _FAILOVER_BINS[None, :]), axis=1).astype(np.int64)
    return nearest


# a daily cycle's strength and where the deadline falls in it, binned (3 h of phase)
_STRENGTH_BINS = np.array([0.25, 0.5, 0.75, 1.0, 1.5])
_PHASE_BINS = 8


def cycle_keys(strength: FloatArray, deadline_after_peak_h: FloatArray) -> IntArray:
    """Per row: 0 for no cycle (strength 0), else 1 + the (strength, phase) bin of its cycle."""
    s = np.argmin(np.abs(strength[:, None] - _STRENGTH_BINS[None, :]), axis=1)
    phase = np.rint(np.mod(deadline_after_peak_h, 24.0) / (24.0 / _PHASE_BINS)).astype(np.int64) % _PHASE_BINS
    keys: IntArray = np.where(strength > 0.0, 1 + s * _PHASE_BINS + phase, 0).astype(np.int64)
    return keys


def _cycle_of(key: int) -> DailyCycle:
    """The cycle of a key of :func:`cycle_keys` above 0."""
    s, phase = divmod(key - 1, _PHASE_BINS)
    return DailyCycle(float(_STRENGTH_BINS[s]), phase * 24.0 / _PHASE_BINS)


_MODEL_KEYS = len(_LOSS_BINS) ** 2 * len(_FAILOVER_BINS)
_CYCLE_KEYS = 1 + len(_STRENGTH_BINS) * _PHASE_BINS


class PlanCache:
    """Action tables of one grid, one per binned market model and daily cycle, stacked for
    vectorised look-ups."""

    def __init__(self, grid: PlanGrid) -> None:
        self.grid = grid
        self.slot = np.full(_MODEL_KEYS * _CYCLE_KEYS, -1, dtype=np.int64)
        self.count = 0
        self.tables = np.zeros((8, grid.time_steps, grid.slack_steps, 4), dtype=np.int8)

    def lookup(
        self, ride_loss: FloatArray, failover: FloatArray, recovery: FloatArray,
        time_left_h: FloatArray, slack_h: FloatArray, situation: IntArray,
        cycle: IntArray | None = None,
    ) -> IntArray:  # fmt: skip
        """Action code per row for its (binned) model and cycle (:func:`cycle_keys`; none: no
        cycle), time left, slack and situation."""
        a, q, m = _loss_bin(ride_loss), _failover_bin(failover), _loss_bin(recovery)
        c = np.zeros_like(a) if cycle is None else cycle
        keys = c * _MODEL_KEYS + (a * len(_FAILOVER_BINS) + q) * len(_LOSS_BINS) + m
        lacking = self.slot[keys] < 0
        if lacking.any():
            # plan the missing models and their neighbours (rates drift between bins), with a cycle
            # in every phase of its strength (the deadline's hour differs from start to start): one
            # batch costs little more than one table
            near = np.arange(-1, 2)
            a_near = np.clip(a[lacking][:, None, None] + near[None, :, None], 0, len(_LOSS_BINS) - 1)
            m_near = np.clip(m[lacking][:, None, None] + near[None, None, :], 0, len(_LOSS_BINS) - 1)
            tile = (a_near * len(_FAILOVER_BINS) + q[lacking][:, None, None]) * len(_LOSS_BINS) + m_near
            cyc = c[lacking]
            phases = np.where(
                cyc[:, None] > 0,
                (cyc[:, None] - 1) // _PHASE_BINS * _PHASE_BINS + 1 + np.arange(_PHASE_BINS)[None, :],
                0,
            )
            wanted = np.unique(tile[:, None] + phases[:, :, None, None] * _MODEL_KEYS)
            self._add([int(key) for key in wanted[self.slot[wanted] < 0]])
        g = self.grid
        t = np.clip(np.rint(time_left_h / g.step_h), 1, g.time_steps - 1).astype(np.int64)
        # work is left (else nobody asks): at least one step of it, never "done" by rounding
        s = np.clip(np.minimum(np.rint(slack_h / g.step_h), t - 1), 0, g.slack_steps - 1).astype(np.int64)
        actions: IntArray = self.tables[self.slot[keys], t, s, situation].astype(np.int64)
        return actions

    def _add(self, keys: list[int]) -> None:
        """Plan the tables of ``keys``: those without a cycle in one batch, those with one in another
        (a batch costs little more than one model: the steps are a Python loop)."""
        plain = [key for key in keys if key < _MODEL_KEYS]
        cyclic = [key for key in keys if key >= _MODEL_KEYS]
        for group in (plain, cyclic):
            if not group:
                continue
            models = []
            for key in group:
                rest, m = divmod(key % _MODEL_KEYS, len(_LOSS_BINS))
                a, q = divmod(rest, len(_FAILOVER_BINS))
                ride, fail = float(_LOSS_BINS[a]), float(_FAILOVER_BINS[q])
                models.append(MarketModel(ride, fail, ride * (1.0 - fail), float(_LOSS_BINS[m])))
            n, need = self.count, self.count + len(group)
            if need > self.tables.shape[0]:
                grown = np.zeros((max(2 * need, 8), *self.tables.shape[1:]), dtype=np.int8)
                grown[:n] = self.tables[:n]
                self.tables = grown
            cycles = None if group is plain else [_cycle_of(key // _MODEL_KEYS) for key in group]
            self.tables[n:need] = plan(self.grid, models, cycles)
            self.slot[group] = np.arange(n, need)
            self.count = need


_CACHES: OrderedDict[PlanGrid, PlanCache] = OrderedDict()
_CACHE_BYTES = 256 * 2**20


def plan_cache(grid: PlanGrid) -> PlanCache:
    """The cache of ``grid``; the least recently used grids go when the tables pass 256 MiB."""
    cache = _CACHES.pop(grid, None) or PlanCache(grid)
    _CACHES[grid] = cache
    while len(_CACHES) > 1 and sum(c.tables.nbytes for c in _CACHES.values()) > _CACHE_BYTES:
        _CACHES.popitem(last=False)
    return cache


__all__ = ["Action", "DailyCycle", "MarketModel", "PlanCache", "PlanGrid", "cycle_keys", "plan", "plan_cache"]
