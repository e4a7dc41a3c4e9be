"""The controller on the local backend makes the market decisions the simulator makes on the same trace.

Two zones, played at 5 s a tick: zone 1 has spot for two ticks and then none; zone 2 has none until
tick 8 and then keeps it. With 9 ticks of work and a deadline of 22 ticks, gpuctl's default policy
runs spot in zone 1, falls back to on-demand once the slack runs under its reserve, and moves to
spot in zone 2 when it appears. The scenario was chosen so that the simulator's answer does not
change when the changeover is twice as long or the work one tick longer or shorter: real launches
on a busy 2-core machine are not exactly one tick.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from orchestrator.policies import DEFAULT_POLICY, market_policy
from orchestrator.policies.simulator import Launch, SimJob, simulate
from orchestrator.policies.traces import AvailabilityTrace
from tests.controller.conftest import TINY, Gpuctl, write_job

TICK_S = 5.0
GAP_S, SPEEDUP = 300, 60  # 300 s trace ticks played 60x faster: 5 s each
ZONES = ("use1-az1", "use1-az2")
WORK_TICKS, DEADLINE_TICKS, CHANGEOVER_TICKS = 9, 22, 1
SPOT_PRICE, ON_DEMAND_PRICE = 0.5197, 3.06  # the built-in catalog's V100 prices in use1-az1


def _traces() -> np.ndarray:
    counts = np.zeros((2, 80), dtype=np.int64)
    counts[0, :2] = 1
    counts[1, 8:] = 1
    return counts


def simulated_launches(
    work_ticks: int = WORK_TICKS, changeover_ticks: int = CHANGEOVER_TICKS
) -> list[Launch]:
    hours = TICK_S / 3600
    trace = AvailabilityTrace(ZONES, hours, _traces())
    job = SimJob(
        work_ticks * hours, DEADLINE_TICKS * hours, changeover_ticks * hours, SPOT_PRICE, ON_DEMAND_PRICE
    )
    launches: list[Launch] = []
    result = simulate(market_policy(DEFAULT_POLICY), trace, job, np.array([0]), launches)
    assert bool(result.deadline_met[0])
    return launches


def _decisions(launches: list[Launch]) -> list[tuple[str, str | None]]:
    return [(launch.market, launch.zone) for launch in launches]


def test_the_scenario_is_robust_in_the_simulator() -> None:
    expected = [("spot", "use1-az1"), ("on-demand", None), ("spot", "use1-az2")]
    assert _decisions(simulated_launches()) == expected
    for work, changeover in [(WORK_TICKS + 1, 1), (WORK_TICKS - 1, 1), (WORK_TICKS, 2), (WORK_TICKS + 1, 2)]:
        assert _decisions(simulated_launches(work, changeover)) == expected


@pytest.mark.slow
def test_controller_decides_as_the_simulator(gpuctl: Gpuctl, tmp_path: Path) -> None:
    files = []
    for zone, row in zip(ZONES, _traces(), strict=True):
        path = tmp_path / f"{zone}.json"
        path.write_text(json.dumps({"metadata": {"gap_seconds": GAP_S}, "data": row.tolist()}))
        files += ["--spot-trace", f"{zone}={path}"]
    step_s = 0.25
    steps = int(WORK_TICKS * TICK_S / step_s)
    job_file = write_job(tmp_path, "parity", (
        f"command: {TINY} {steps} {step_s}\n"
        f"market: {{zones: [{', '.join(ZONES)}], changeover: {CHANGEOVER_TICKS * TICK_S:g}s}}\n"
        f"goals: {{deadline: {DEADLINE_TICKS * TICK_S:g}s, compute_hours: {WORK_TICKS * TICK_S / 3600}}}\n"
        "checkpoint: {notice_grace_seconds: 5}\n"
    ))  # fmt: skip
    gpuctl.run("submit", str(job_file), *files, "--trace-speedup", str(SPEEDUP), timeout=400)
    doc = json.loads(gpuctl.run("list", "-o", "json").stdout)[0]
    assert doc["state"] == "SUCCEEDED", doc
    first_of_attempt: dict[int, dict[str, object]] = {}
    for seg in doc["segments"]:
        first_of_attempt.setdefault(int(seg["attempt"]), seg)
    controller = [
        (str(s["market"]), str(s["zone"]) if s["market"] == "spot" else None)
        for _, s in sorted(first_of_attempt.items())
    ]
    assert controller == _decisions(simulated_launches()), doc["segments"]
