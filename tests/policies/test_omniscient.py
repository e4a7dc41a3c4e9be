"""The omniscient DP against brute force over every action sequence, in the simulator itself."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from orchestrator.policies.context import Action, IntArray, MarketBatch
from orchestrator.policies.market import POLICIES, MarketPolicy, market_policy
from orchestrator.policies.omniscient import omniscient
from orchestrator.policies.simulator import SimJob, simulate
from orchestrator.policies.traces import AvailabilityTrace


class Scripted(MarketPolicy):
    """Row i follows the action sequence ``table[i]`` (codes: 0 wait, 1 on-demand, 2 + z spot in z)."""

    name = "scripted"
    description = "test only"

    def __init__(self, table: IntArray) -> None:
        self.table = table

    def decide_batch(self, b: MarketBatch) -> tuple[IntArray, IntArray]:
        tau = round(float(b.elapsed_h[0]) / b.tick_h)
        code = (
            self.table[:, tau] if tau < self.table.shape[1] else np.ones(self.table.shape[0], dtype=np.int64)
        )
        action = np.where(
            code == 0, int(Action.WAIT), np.where(code == 1, int(Action.ON_DEMAND), int(Action.SPOT))
        )
        return action.astype(np.int64), np.where(code >= 2, code - 2, -1).astype(np.int64)


def brute_force(trace: AvailabilityTrace, job: SimJob, start: int) -> float:
    ticks = int(np.ceil(job.deadline_h / trace.tick_h))
    options = len(trace.zones) + 2
    table = np.array(list(itertools.product(range(options), repeat=ticks)), dtype=np.int64)
    res = simulate(Scripted(table), trace, job, np.full(len(table), start, dtype=np.int64))
    return float(res.cost_usd[res.deadline_met].min()) if res.deadline_met.any() else float("inf")


CASES = [
    # zones, work h, deadline h, changeover h
    (1, 3.0, 6.0, 1.0),
    (1, 3.5, 6.5, 1.0),
    (1, 2.0, 7.0, 2.0),
    (2, 3.0, 6.0, 1.0),
    (2, 2.5, 6.0, 0.0),
    (2, 3.0, 7.0, 1.5),
]


@pytest.mark.parametrize(("zones", "work", "deadline", "changeover"), CASES)
def test_dp_equals_brute_force(zones: int, work: float, deadline: float, changeover: float) -> None:
    rng = np.random.default_rng(int(work * 10 + deadline + zones))
    for _ in range(3):
        counts = (rng.random((zones, 12)) < 0.55).astype(np.int64)
        trace = AvailabilityTrace(tuple(f"z{i}" for i in range(zones)), 1.0, counts)
        job = SimJob(work, deadline, changeover, 1.0, 3.0)
        dp = omniscient(trace, job, np.array([0, 1]))
        for i, start in enumerate((0, 1)):
            assert dp.cost_usd[i] == pytest.approx(brute_force(trace, job, start), rel=1e-5)


def test_dp_is_a_lower_bound_for_every_policy() -> None:
    rng = np.random.default_rng(7)
    counts = (rng.random((3, 600)) < 0.5).astype(np.int64)
    trace = AvailabilityTrace(("a", "b", "c"), 0.25, counts)
    job = SimJob(12.0, 16.0, 0.5, 1.0, 3.0)
    starts = np.arange(0, 500, 25)
    best = omniscient(trace, job, starts).cost_usd
    for name in POLICIES:
        got = simulate(market_policy(name), trace, job, starts).cost_usd
        assert (best <= got + 1e-4).all(), name


def test_infeasible_deadline_has_no_schedule() -> None:
    trace = AvailabilityTrace(("a",), 1.0, np.ones((1, 20), dtype=np.int64))
    res = omniscient(trace, SimJob(5.0, 5.5, 1.0, 1.0, 3.0), np.array([0]))
    assert not res.deadline_met[0] and np.isinf(res.cost_usd[0])
