"""`gpuctl simulate`: JSON shape, table, elastic comparison and clear errors for bad traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.cli.main import main
from orchestrator.policies.market import DEFAULT_POLICY, POLICIES

KEYS = {
    "cost_usd",
    "cost_vs_on_demand",
    "deadline_met_fraction",
    "spot_hours",
    "on_demand_hours",
    "preemptions",
}


def write_trace(path: Path, data: object, gap: object = 600) -> str:
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))
    return str(path)


def base_args(*traces: str) -> list[str]:
    args = ["simulate"]
    for t in traces:
        args += ["--trace", t]
    return [
        *args,
        "--compute-hours",
        "6",
        "--deadline-hours",
        "8",
        "--changeover-hours",
        "0.2",
        "--on-demand-price",
        "3.06",
        "--spot-price",
        "0.918",
        "--starts",
        "5",
        "--seed",
        "1",
    ]


@pytest.fixture
def two_zones(tmp_path: Path) -> list[str]:
    rng = np.random.default_rng(0)
    return [
        write_trace(tmp_path / f"{z}_v100_1.json", (rng.random(300) < 0.6).astype(int).tolist())
        for z in ("us-x-1a", "us-x-1b")
    ]


def test_json_shape(two_zones: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*base_args(*two_zones), "--policy", "all", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["policies"]) == set(POLICIES)
    assert doc["default_policy"] == DEFAULT_POLICY and doc["starts"] == 5
    for summary in [*doc["policies"].values(), doc["omniscient"]]:
        assert set(summary) >= KEYS
    assert doc["policies"]["on-demand"]["cost_vs_on_demand"] == pytest.approx(1.0)
    assert doc["omniscient"]["cost_usd"] <= min(s["cost_usd"] for s in doc["policies"].values()) + 1e-6


def test_table_and_policy_selection(two_zones: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*base_args(*two_zones), "--policy", "greedy", "--no-omniscient"]) == 0
    out = capsys.readouterr().out
    assert "greedy" in out and "uniform-progress" not in out and "us-x-1a" in out


def elastic_doc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    rng = np.random.default_rng(2)
    trace = write_trace(tmp_path / "z_v100_1.json", rng.integers(0, 5, 300).tolist())
    assert main([*base_args(trace), "--nodes", "2:4", "--policy", DEFAULT_POLICY, "-o", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_elastic_compares_rescale_with_waiting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = elastic_doc(tmp_path, capsys)
    assert {"rescale", "wait-for-all"} <= set(doc["policies"])
    assert doc["policies"]["wait-for-all"]["deadline_met_fraction"] == 1.0


def test_elastic_rescale_meets_every_deadline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An elastic spot run on fewer nodes (pausing at each resize) loses slack while its zone keeps
    capacity. The default (plan-ahead) leaves such a ride for on-demand once its slack is down to a
    fallback launch and a tick (without that rule: 0.8 of deadlines met on this trace). The other
    policies ride on (greedy, uniform progress, eager failover: 0.8; reserve-slack, whose reserve
    covers the slowdown: all): a known problem of theirs, not pinned here."""
    doc = elastic_doc(tmp_path, capsys)
    assert doc["policies"]["rescale"]["deadline_met_fraction"] == 1.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"metadata": {"gap_seconds": 600}, "data": []}', "empty trace"),
        ("not json", "not valid JSON"),
        ('{"data": [1, 0]}', "lacks 'metadata'"),
        ('{"metadata": {"gap_seconds": 0}, "data": [1]}', "gap_seconds"),
        ('{"metadata": {"gap_seconds": 600}, "data": [1, -1]}', "non-negative"),
    ],
)
def test_bad_trace_is_a_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(base_args(str(bad))) == 2
    err = capsys.readouterr().err
    assert message in err and "To fix" in err


def test_different_ticks_are_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_trace(tmp_path / "a.json", [1] * 100, gap=600)
    b = write_trace(tmp_path / "b.json", [1] * 100, gap=300)
    assert main(base_args(a, b)) == 2
    assert "different tick lengths" in capsys.readouterr().err


def test_missing_trace_and_short_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(base_args(str(tmp_path / "nope.json"))) == 2
    assert "does not exist" in capsys.readouterr().err
    short = write_trace(tmp_path / "s.json", [1] * 10)
    assert main(base_args(short)) == 2
    assert "shorter than the deadline" in capsys.readouterr().err
