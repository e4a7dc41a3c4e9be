"""`gpuctl simulate --job job.yaml`: work, deadline, changeover, nodes and prices from the spec and catalog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from orchestrator.catalog.offers import MarketKind, find_offers
from orchestrator.cli.main import main

QUICKSTART_JOB = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "job.yaml"


def write_trace(path: Path, data: list[int]) -> str:
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    return str(path)


@pytest.fixture
def one_node_zones(tmp_path: Path) -> list[str]:
    rng = np.random.default_rng(0)
    return [
        write_trace(tmp_path / f"{z}_v100_1.json", (rng.random(300) < 0.6).astype(int).tolist())
        for z in ("us-x-1a", "us-x-1b")
    ]


def write_job(tmp_path: Path, **overrides: Any) -> str:
    doc: dict[str, Any] = {
        "name": "sim",
        "command": "train.py",
        "resources": {"gpu_types": ["V100"], "gpus_per_node": 1, "nodes": 1},
        "goals": {"compute_hours": 6, "deadline": "8h"},
        "market": {"changeover": "12m"},
    }
    for key, value in overrides.items():
        section, field = key.split("__")
        if value is None:
            doc[section].pop(field)
        else:
            doc[section][field] = value
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def simulate(capsys: pytest.CaptureFixture[str], traces: list[str], *args: str) -> dict[str, Any]:
    argv = ["simulate", *(a for t in traces for a in ("--trace", t)), *args]
    assert main([*argv, "--starts", "5", "--seed", "1", "--no-omniscient", "-o", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def cheapest_v100(market: MarketKind) -> float:
    prices = [o.price_per_gpu(market) for o in find_offers("V100") if o.gpu_count == 1]
    return min(p for p in prices if p is not None)


def test_job_file_gives_what_the_flags_would(
    tmp_path: Path, one_node_zones: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = simulate(capsys, one_node_zones, "--job", write_job(tmp_path))
    inputs = doc["inputs"]
    assert inputs["compute_hours"] == 6 and inputs["deadline_hours"] == pytest.approx(8)
    assert inputs["changeover_hours"] == pytest.approx(0.2)
    assert inputs["spot_price_usd_per_hour"] == pytest.approx(cheapest_v100(MarketKind.SPOT))
    assert inputs["on_demand_price_usd_per_hour"] == pytest.approx(cheapest_v100(MarketKind.ON_DEMAND))
    assert inputs["sources"]["compute_hours"] == "goals.compute_hours"
    assert inputs["sources"]["spot_price"].startswith("catalog: 1 x V100, aws ")
    flags = simulate(
        capsys, one_node_zones,
        "--compute-hours", "6", "--deadline-hours", "8", "--changeover-hours", "0.2",
        "--spot-price", str(inputs["spot_price_usd_per_hour"]),
        "--on-demand-price", str(inputs["on_demand_price_usd_per_hour"]),
    )  # fmt: skip
    assert flags["policies"] == doc["policies"]
    assert flags["on_demand_only_cost_usd"] == doc["on_demand_only_cost_usd"]


def test_flags_override_the_job_file(
    tmp_path: Path, one_node_zones: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    job = write_job(tmp_path)
    inputs = simulate(capsys, one_node_zones, "--job", job, "--compute-hours", "3", "--spot-price", "0.5")[
        "inputs"
    ]
    assert inputs["compute_hours"] == 3 and inputs["sources"]["compute_hours"] == "--compute-hours"
    assert inputs["spot_price_usd_per_hour"] == 0.5 and inputs["sources"]["spot_price"] == "--spot-price"
    assert (
        inputs["deadline_hours"] == pytest.approx(8)
        and inputs["sources"]["deadline_hours"] == "goals.deadline"
    )


def test_table_says_where_the_numbers_came_from(
    tmp_path: Path, one_node_zones: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--trace", one_node_zones[0], "--job", write_job(tmp_path), "--starts", "3"]
    assert main([*argv, "--no-omniscient", "--deadline-hours", "9"]) == 0
    head = capsys.readouterr().out.splitlines()[:2]
    assert head[0] == (
        "work 6 h (goals.compute_hours), deadline 9 h (--deadline-hours), changeover 0.2 h (market.changeover)"
    )
    assert head[1].startswith("USD/h, per node: spot ") and "(catalog: 1 x V100" in head[1]


def test_fixed_nodes_on_a_one_node_trace_are_priced_as_one_unit(
    tmp_path: Path, one_node_zones: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = simulate(capsys, one_node_zones, "--job", write_job(tmp_path, resources__nodes=3))
    inputs = doc["inputs"]
    assert (inputs["min_nodes"], inputs["max_nodes"], inputs["priced_nodes"]) == (1, 1, 3)
    on_demand = 3 * cheapest_v100(MarketKind.ON_DEMAND)
    assert inputs["on_demand_price_usd_per_hour"] == pytest.approx(on_demand)
    # one launch (0.2 h changeover = 2 ticks of 600 s, rounded up) then 6 h of work, all on-demand
    assert doc["on_demand_only_cost_usd"] == pytest.approx(on_demand * (2 / 6 + 6))


def test_elastic_spec_on_a_node_count_trace_compares_rescaling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "z_v100_4.json", np.random.default_rng(2).integers(0, 5, 300).tolist())
    job = write_job(tmp_path, resources__nodes={"min": 2, "max": 4})
    doc = simulate(capsys, [trace], "--job", job)
    assert (doc["inputs"]["min_nodes"], doc["inputs"]["max_nodes"], doc["inputs"]["priced_nodes"]) == (
        2,
        4,
        1,
    )
    assert {"rescale", "wait-for-all"} <= set(doc["policies"])


@pytest.mark.parametrize(
    ("missing", "field", "flag"),
    [
        ("goals__compute_hours", "goals.compute_hours", "--compute-hours"),
        ("goals__deadline", "goals.deadline", "--deadline-hours"),
    ],
)
def test_a_missing_field_names_the_field_and_the_flag(
    tmp_path: Path,
    one_node_zones: list[str],
    capsys: pytest.CaptureFixture[str],
    missing: str,
    field: str,
    flag: str,
) -> None:
    job = write_job(tmp_path, **{missing: None})
    assert main(["simulate", "--trace", one_node_zones[0], "--job", job]) == 2
    err = capsys.readouterr().err
    assert f"job file {job} has no {field}" in err and f"To fix: add {field} to it, or give {flag}" in err


def test_the_quickstart_job_needs_its_work_estimate(
    one_node_zones: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--trace", one_node_zones[0], "--job", str(QUICKSTART_JOB)]) == 2
    assert "has no goals.compute_hours" in capsys.readouterr().err
    doc = simulate(
        capsys, one_node_zones, "--job", str(QUICKSTART_JOB), "--compute-hours", "1", "--deadline-hours", "2"
    )
    assert doc["inputs"]["priced_nodes"] == 2  # the quickstart runs 2 nodes


def test_without_a_job_file_every_number_is_a_flag(
    one_node_zones: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--trace", one_node_zones[0], "--compute-hours", "6", "--deadline-hours", "8"]
    assert main([*argv, "--changeover-hours", "0.2", "--spot-price", "1"]) == 2
    err = capsys.readouterr().err
    assert "--on-demand-price is missing" in err and "--job job.yaml" in err


def test_the_market_log_is_a_flag_and_changes_what_plan_ahead_knows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each start point is given the week before it by default (plan-ahead reads a daily cycle
    from it where the days agree); ``--market-log-hours 0`` plans as the Kubernetes operator does.
    Out of range is an error naming the flag."""
    rng = np.random.default_rng(2)
    hours = np.arange(30 * 24 * 6) / 6.0  # 30 days of 10-minute ticks
    night = 1.0 / (1.0 + np.exp(-3.0 * np.cos(2 * np.pi * hours / 24.0)))  # spot mostly at night
    runs = (rng.random(hours.size // 6) < night[::6]).repeat(6)
    trace = write_trace(tmp_path / "us-x-1a_v100_1.json", runs.astype(int).tolist())
    common = ["simulate", "--trace", trace, "--compute-hours", "48", "--deadline-hours", "60",
              "--changeover-hours", "0.5", "--on-demand-price", "3", "--spot-price", "1.5",
              "--policy", "plan-ahead", "--starts", "60", "--no-omniscient", "-o", "json"]  # fmt: skip
    costs = []
    for log_h in ("168", "0"):
        assert main([*common, "--market-log-hours", log_h]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["policies"]["plan-ahead"]["deadline_met_fraction"] == 1.0
        costs.append(doc["policies"]["plan-ahead"]["cost_usd"])
    assert costs[0] < costs[1]  # the night runs, waited for
    assert main([*common, "--market-log-hours", "-1"]) == 2
    assert "--market-log-hours" in capsys.readouterr().err
