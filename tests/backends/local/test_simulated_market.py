from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.backends.local.market import SimulatedMarket, parse_schedule, preemption_schedule
from orchestrator.errors import UserError


def market(tmp_path: Path, **options: object) -> SimulatedMarket:
    return SimulatedMarket(dict(options), tmp_path / "market.json")


def test_no_schedule_means_unlimited(tmp_path: Path) -> None:
    assert market(tmp_path).capacity(1000, 50) is None


def test_step_then_after_fires_in_order_and_survives_restart(tmp_path: Path) -> None:
    options = SimulatedMarket.options(parse_schedule("step:10=1,after:15s=inf"))
    m = market(tmp_path, **options)
    assert m.capacity(5, 3) is None
    assert m.capacity(8, 10) == 1  # fired at t=8
    assert m.capacity(20, 12) == 1
    restarted = market(tmp_path, **options)  # a new controller reads the fired times back
    assert restarted.capacity(23.5, 12) is None


def test_preempt_at_is_an_outage(tmp_path: Path) -> None:
    m = market(tmp_path, **SimulatedMarket.options(preemption_schedule(["30s"], "10s")))
    assert [m.capacity(t, None) for t in (29, 30, 35, 40.5)] == [None, 0, 0, None]


def test_trace_is_played_with_speedup(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 100}, "data": [1, 0, 1]}))
    m = market(tmp_path, **SimulatedMarket.options(trace=str(trace), speedup=100))
    assert [m.capacity(t, None) for t in (0.5, 1.5, 2.5, 99)] == [1, 0, 1, 1]


@pytest.mark.parametrize("text", ["step:x=1", "30s=-1", "30s", "soon=1"])
def test_bad_schedules_are_explained(text: str) -> None:
    with pytest.raises(UserError) as err:
        parse_schedule(text)
    assert "To fix" in err.value.message


def test_bad_trace_is_explained(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": []}')
    with pytest.raises(UserError, match="cannot read spot trace"):
        SimulatedMarket.options(trace=str(bad))
