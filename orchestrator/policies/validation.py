"""Leave-one-set-out validation of market policies: never score a policy on the data its constants
were chosen on.

Trace sets: the shared AWS traces and the synthetic regimes of :mod:`orchestrator.policies.synthetic`.
Each row is a zone group of a set under one job setting (deadline, changeover, price ratio). A
policy with constants to choose comes as several candidates; for each held-out set the candidate
is chosen on the other sets only (fewest rows more than :data:`TOLERANCE` above the best baseline,
then the lowest mean cost), then scored on the held-out set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from orchestrator.policies.base import MarketPolicy
from orchestrator.policies.context import FloatArray
from orchestrator.policies.daily import MARKET_LOG_H
from orchestrator.policies.omniscient import omniscient
from orchestrator.policies.simulator import SimJob, simulate, start_points
from orchestrator.policies.traces import AvailabilityTrace

BASELINES = ("greedy", "uniform-progress", "eager-failover")
TOLERANCE = 0.005  # of the on-demand cost
WORK_H, ON_DEMAND_PRICE = 48.0, 3.06

TraceSets = Mapping[str, Sequence[tuple[str, AvailabilityTrace]]]


@dataclass(frozen=True)
class JobSetting:
    """A job of ``WORK_H`` hours: deadline as a multiple of the work, changeover, spot/on-demand price."""

    deadline_factor: float
    changeover_h: float
    price_ratio: float

    def job(self) -> SimJob:
        return SimJob(
            WORK_H, WORK_H * self.deadline_factor, self.changeover_h,
            ON_DEMAND_PRICE * self.price_ratio, ON_DEMAND_PRICE,
        )  # fmt: skip

    @property
    def label(self) -> str:
        return f"{self.deadline_factor:.3g}x, {self.changeover_h:g} h, {self.price_ratio:g}"


# the range the default must hold on: deadlines 1.05x..2x the work, changeovers 0.05..0.5 h, spot at
# 0.2..0.5 of on-demand; the paper's setting (52 h and 70 h, 0.2 h, 0.3) in the middle
SETTINGS = (
    JobSetting(1.05, 0.05, 0.2),
    JobSetting(52.0 / 48.0, 0.2, 0.3),
    JobSetting(70.0 / 48.0, 0.2, 0.3),
    JobSetting(1.25, 0.5, 0.5),
    JobSetting(2.0, 0.5, 0.2),
    JobSetting(1.6, 0.05, 0.4),
)


@dataclass(frozen=True)
class Row:
    """One zone group under one setting: mean cost (fraction of on-demand only) and deadline-met
    fraction per policy, and the omniscient cost.

    ``regret_se``: per policy, the standard error of its regret (its cost minus the best baseline's,
    start point by start point, both on the same start points). A row's regret is a mean over a few
    dozen start points; where runs are long and changeovers dear it is uncertain by more than the
    tolerance, so a row above it is not always a policy worse than the best baseline there.
    """

    trace_set: str
    group: str
    setting: JobSetting
    cost: Mapping[str, float]
    met: Mapping[str, float]
    omniscient: float
    regret_se: Mapping[str, float] = field(default_factory=dict)

    def best_baseline(self) -> float:
        return min(self.cost[name] for name in BASELINES)

    def regret(self, name: str) -> float:
        """How much more than the best baseline ``name`` costs, as a fraction of on-demand."""
        return self.cost[name] - self.best_baseline()

    def clearly_above(self, name: str) -> bool:
        """Above the tolerance by more than two standard errors of the regret."""
        return self.regret(name) - 2.0 * self.regret_se.get(name, 0.0) > TOLERANCE

    def share(self, name: str) -> float | None:
        """The share of the omniscient savings ``name`` captures."""
        saved = 1.0 - self.omniscient
        return (1.0 - self.cost[name]) / saved if saved > 1e-9 else None


def evaluate_rows(
    sets: TraceSets,
    policies: Mapping[str, MarketPolicy],
    settings: Sequence[JobSetting] = SETTINGS,
    starts: int = 100,
    seed: int = 0,
    market_log_h: float = MARKET_LOG_H,
) -> list[Row]:
    """Every policy and the omniscient bound on every (set, group, setting), same start points, each
    given ``market_log_h`` hours of the trace before it (a controller's log of the market)."""
    rows: list[Row] = []
    for setting in settings:  # outer: a policy's planning tables are cached per job setting
        for set_name, groups in sets.items():
            for group, trace in groups:
                job = setting.job()
                points = start_points(trace, job, starts, seed)
                od = job.on_demand_cost(trace.tick_h)
                per_start, met = {}, {}
                for name, policy in policies.items():
                    res = simulate(policy, trace, job, points, market_log_h=market_log_h)
                    per_start[name] = res.cost_usd / od
                    met[name] = float(np.mean(res.deadline_met))
                cost = {name: float(np.mean(c)) for name, c in per_start.items()}
                best = float(np.mean(omniscient(trace, job, points).cost_usd)) / od
                se = _regret_se(per_start, cost)
                rows.append(Row(set_name, group, setting, cost, met, best, se))
    return rows


def _regret_se(per_start: Mapping[str, FloatArray], cost: Mapping[str, float]) -> dict[str, float]:
    """Standard error of each policy's per-start cost minus the best baseline's (paired)."""
    baselines = [name for name in BASELINES if name in cost]
    if not baselines:
        return {}
    best = per_start[min(baselines, key=lambda name: cost[name])]
    n = best.shape[0]
    if n < 2:
        return {name: float("nan") for name in per_start}
    return {name: float(np.std(c - best, ddof=1) / math.sqrt(n)) for name, c in per_start.items()}


@dataclass(frozen=True)
class HeldOut:
    """The candidate chosen without ``trace_set``, and its rows there."""

    trace_set: str
    chosen: str
    rows: list[Row]


def choose(rows: Sequence[Row], candidates: Sequence[str]) -> str:
    """The candidate with the fewest rows above the tolerance, then the lowest mean cost."""

    def score(name: str) -> tuple[int, float]:
        above = sum(1 for r in rows if r.regret(name) > TOLERANCE)
        return above, float(np.mean([r.cost[name] for r in rows]))

    return min(candidates, key=score)


def leave_one_set_out(rows: Sequence[Row], candidates: Sequence[str]) -> list[HeldOut]:
    out = []
    for held in dict.fromkeys(r.trace_set for r in rows):
        train = [r for r in rows if r.trace_set != held]
        chosen = choose(train, candidates) if train else candidates[0]
        out.append(HeldOut(held, chosen, [r for r in rows if r.trace_set == held]))
    return out


def leave_traces_out(
    rows: Sequence[Row], candidates: Sequence[str], files: Mapping[str, frozenset[str]]
) -> list[tuple[Row, str]]:
    """Each row with the candidate chosen on the rows that share no trace file with it (``files``:
    each row group's trace files): a zone's own data, alone or in a group, never chooses what is
    scored on it."""
    out = []
    for row in rows:
        held = files[row.group]
        train = [r for r in rows if not files[r.group] & held]
        out.append((row, choose(train, candidates) if train else candidates[0]))
    return out


@dataclass(frozen=True)
class Summary:
    rows: int
    above_tolerance: int
    clearly_above: int
    """Rows above the tolerance by more than two standard errors of their regret."""
    worst_regret: float
    mean_share: float
    min_met: float


def summarise(pairs: Sequence[tuple[Row, str]]) -> Summary:
    """Over (row, policy scored there) pairs."""
    regrets = [r.regret(name) for r, name in pairs]
    shares = [s for r, name in pairs if (s := r.share(name)) is not None]
    return Summary(
        rows=len(pairs),
        above_tolerance=sum(1 for x in regrets if x > TOLERANCE),
        clearly_above=sum(1 for r, name in pairs if r.clearly_above(name)),
        worst_regret=max(regrets) if regrets else 0.0,
        mean_share=float(np.mean(shares)) if shares else float("nan"),
        min_met=min((r.met[name] for r, name in pairs), default=1.0),
    )
