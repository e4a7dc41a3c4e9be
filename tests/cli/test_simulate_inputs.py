"""`gpuctl simulate --job job.yaml`: work, deadline, changeover, nodes and prices from the spec and catalog
(each trace's zone priced from its own row, else its region's, never another zone's); every missing
input named at once, with a command line that runs; progress on standard error."""

from __future__ import annotations

import io
import json
import shlex
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from rich.console import Console

from orchestrator.catalog.offers import MarketKind, find_offers
from orchestrator.cli import simulate_cmd
from orchestrator.cli.main import main
from orchestrator.cli.simulate_cmd import SimulationProgress

QUICKSTART_JOB = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "job.yaml"


def write_trace(path: Path, data: list[int]) -> str:
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    return str(path)


ZONES = ("use1-az1", "use1-az5")
"""Zones the catalog has rows for (AWS AZ IDs), with different V100 spot prices."""


@pytest.fixture
def one_node_zones(tmp_path: Path) -> list[str]:
    rng = np.random.default_rng(0)
    return [
        write_trace(tmp_path / f"{z}_v100_1.json", (rng.random(300) < 0.6).astype(int).tolist())
        for z in ZONES
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


def v100_in(zone: str, market: MarketKind) -> float:
    """The 1 x V100 price of the catalog's row for ``zone``."""
    (price,) = [o.price_per_gpu(market) for o in find_offers("V100", zones=[zone]) if o.gpu_count == 1]
    assert price is not None
    return price


def mean_v100(market: MarketKind) -> float:
    return statistics.fmean(v100_in(zone, market) for zone in ZONES)


def test_job_file_gives_what_the_flags_would(
    tmp_path: Path, one_node_zones: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = simulate(capsys, one_node_zones, "--job", write_job(tmp_path))
    inputs = doc["inputs"]
    assert inputs["compute_hours"] == 6 and inputs["deadline_hours"] == pytest.approx(8)
    assert inputs["changeover_hours"] == pytest.approx(0.2)
    assert inputs["spot_price_usd_per_hour"] == pytest.approx(mean_v100(MarketKind.SPOT))
    assert inputs["on_demand_price_usd_per_hour"] == pytest.approx(mean_v100(MarketKind.ON_DEMAND))
    assert inputs["sources"]["compute_hours"] == "goals.compute_hours"
    assert inputs["sources"]["spot_price"] == (
        "catalog: 1 x V100, aws use1-az1 p3.2xlarge, built-in list prices; "
        "1 x V100, aws use1-az5 p3.2xlarge, built-in list prices"
    )
    assert inputs["notes"] == [  # the two zones' spot prices differ; on-demand is one price
        f"spot prices differ between the traces' zones (use1-az1 {v100_in('use1-az1', MarketKind.SPOT):.4g}, "
        f"use1-az5 {v100_in('use1-az5', MarketKind.SPOT):.4g} USD per node-hour): simulated at their mean, "
        "as the simulator has one spot price (give --spot-price to choose one)"
    ]
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
    on_demand = 3 * mean_v100(MarketKind.ON_DEMAND)
    assert inputs["on_demand_price_usd_per_hour"] == pytest.approx(on_demand)
    # one launch (0.2 h changeover = 2 ticks of 600 s, rounded up) then 6 h of work, all on-demand
    assert doc["on_demand_only_cost_usd"] == pytest.approx(on_demand * (2 / 6 + 6))


def test_elastic_spec_on_a_node_count_trace_compares_rescaling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(
        tmp_path / "use2-az1_v100_4.json", np.random.default_rng(2).integers(0, 5, 300).tolist()
    )
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
    assert (
        "needs 1 more input(s):" in err
        and f"  - {flag} H: " in err
        and f"or {field} in job file {job}" in err
    )


def test_every_missing_input_is_named_at_once_with_a_command_line_that_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`simulate --job examples/quickstart/job.yaml` once took three runs, each naming one more input."""
    monkeypatch.chdir(QUICKSTART_JOB.parents[2])
    job = "examples/quickstart/job.yaml"
    assert main(["simulate", "--job", job]) == 2
    err = capsys.readouterr().err
    assert "gpuctl simulate needs 3 more input(s):" in err
    for flag in ("--trace FILE", "--compute-hours H", "--deadline-hours H"):
        assert f"  - {flag}: " in err, err
    command = err.split("To fix: give them all, e.g.\n", 1)[1].strip()
    words = shlex.split(command)
    assert words[:4] == ["gpuctl", "simulate", "--job", job] and "--compute-hours" in words
    trace = words[words.index("--trace") + 1]
    if not Path(trace).is_file():
        pytest.skip(f"the shared traces are not beside this checkout ({trace})")
    assert main([*words[1:], "--starts", "3", "--no-omniscient", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"]["priced_nodes"] == 2  # the quickstart runs 2 nodes

    assert main(["simulate", "--compute-hours", "6"]) == 2  # no job file: every number is a flag
    err = capsys.readouterr().err
    assert "needs 5 more input(s):" in err and "--deadline-hours H: " in err and "--trace FILE" in err
    assert "--on-demand-price USD: USD per node-hour on-demand, or --job job.yaml to price it" in err
    assert "--compute-hours 6 " in err  # what was given stays in the example


def test_without_a_job_file_every_number_is_a_flag(
    one_node_zones: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--trace", one_node_zones[0], "--compute-hours", "6", "--deadline-hours", "8"]
    assert main([*argv, "--changeover-hours", "0.2", "--spot-price", "1"]) == 2
    err = capsys.readouterr().err
    assert "  - --on-demand-price USD: " in err and "--job job.yaml" in err


def test_a_trace_zone_is_priced_from_its_own_row_or_its_region_never_another_zone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A us-east-1c trace was once priced from use2-az2's row (the cheapest V100 spot anywhere)."""
    job = write_job(tmp_path)
    own = write_trace(tmp_path / "use1-az2_v100_1.json", [1, 0] * 150)
    inputs = simulate(capsys, [own], "--job", job)["inputs"]
    assert inputs["spot_price_usd_per_hour"] == pytest.approx(v100_in("use1-az2", MarketKind.SPOT))
    assert (
        inputs["sources"]["spot_price"] == "catalog: 1 x V100, aws use1-az2 p3.2xlarge, built-in list prices"
    )
    assert inputs["notes"] == []

    named = write_trace(tmp_path / "us-east-1c_v100_1.json", [1, 0] * 150)
    argv = ["simulate", "--trace", named, "--job", job, "--starts", "3", "--no-omniscient", "-o", "json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    inputs = json.loads(captured.out)["inputs"]
    region = [p for o in find_offers("V100", regions=["us-east-1"]) if o.gpu_count == 1
              and (p := o.price_per_gpu(MarketKind.SPOT)) is not None]  # fmt: skip
    assert inputs["spot_price_usd_per_hour"] == pytest.approx(statistics.median(region))
    assert inputs["spot_price_usd_per_hour"] != pytest.approx(
        min(v100_in(z, MarketKind.SPOT) for z in ["use2-az2"])
    )
    assert inputs["sources"]["spot_price"].startswith("catalog: 1 x V100, aws region us-east-1 (median of ")
    note = "no catalog row for zone us-east-1c: priced from its region us-east-1 (the catalog's zones there: use1-az1"
    assert inputs["notes"][0].startswith(note) and f"gpuctl: note: {note}" in captured.err

    nowhere = write_trace(tmp_path / "mars-1a_v100_1.json", [1, 0] * 150)
    assert main(["simulate", "--trace", nowhere, "--job", job]) == 2
    err = capsys.readouterr().err
    assert "the catalog has no spot offer of V100 in zone 'mars-1a' or its region" in err
    assert "To fix: give --spot-price, or name each trace file after the zone" in err


def test_a_long_simulation_shows_progress_on_stderr_and_json_stays_alone_on_stdout(
    one_node_zones: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--compute-hours", "6", "--deadline-hours", "8", "--changeover-hours", "0.2", "--on-demand-price", "3",
             "--spot-price", "1"]  # fmt: skip
    argv = [
        "simulate",
        "--trace",
        one_node_zones[0],
        *flags,
        "--policy",
        "greedy",
        "--starts",
        "3",
        "-o",
        "json",
    ]
    assert main(argv) == 0  # quick: nothing but the result
    captured = capsys.readouterr()
    assert captured.err == "" and json.loads(captured.out)["policies"]
    monkeypatch.setattr(simulate_cmd, "PROGRESS_AFTER_S", 0.0)  # as if it had run a while
    assert main(argv) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)
    lines = captured.err.splitlines()
    assert lines[0].startswith("gpuctl simulate: 0 of 2 runs done, ") and lines[0].endswith(
        "; running greedy"
    )
    assert lines[-1].startswith("gpuctl simulate: 2 of 2 runs done, "), lines


def test_on_a_terminal_the_progress_is_a_bar_that_clears() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with SimulationProgress(console, after_s=0.0) as progress:
        progress("plan-ahead", 1, 4)
    assert "simulating: plan-ahead" in out.getvalue() and "1/4" in out.getvalue()
    quiet = io.StringIO()
    with SimulationProgress(Console(file=quiet, force_terminal=True), after_s=60.0) as progress:
        progress("greedy", 0, 2)
    assert quiet.getvalue() == ""


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
