"""`gpuctl status`, `gpuctl diagnose` and `gpuctl cost report` show each finding's price in USD, and
"not measured" (never zero waste) for a job with no step timings and no GPU measurements (issue 34)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.state.store import JobStore
from orchestrator.testing.states import running_job
from tests.cli.hostile_home import write_lines

STARTED = datetime.now(UTC) - timedelta(hours=2)
"""Two hours before the test runs: set again by the ``store`` fixture, since the suite may run this test long
after it imported the module, and the USD the tests expect is that of a job running 2 hours."""


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobStore:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(sys.modules[__name__], "STARTED", datetime.now(UTC) - timedelta(hours=2))
    return JobStore(tmp_path)


def _steps(store: JobStore, job_id: str, data_s: float, compute_s: float) -> None:
    write_lines(store.job_dir(job_id) / "progress.jsonl", [
        json.dumps({"time": (STARTED + timedelta(seconds=s)).isoformat(), "step": s, "total_steps": 10_000,
                    "data_s": data_s, "compute_s": compute_s}) for s in range(1, 40)
    ])  # fmt: skip


def test_a_job_with_no_measurements_is_not_measured_everywhere(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = running_job(store, STARTED, name="blind")
    assert main(["status", job_id]) == 0
    assert "avoidable spend: not measured" in capsys.readouterr().out
    assert main(["status", job_id, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)["avoidable"]
    assert doc["measured"] == [] and doc["avoidable_month_usd"] is None
    assert main(["diagnose", job_id]) == 0
    out = capsys.readouterr().out
    assert "avoidable spend: not measured" in out and "worth: not measured" in out
    assert "no problems found" not in out
    assert main(["cost", "report"]) == 0
    assert "not measured" in capsys.readouterr().out.split("Avoidable")[1]
    assert main(["cost", "report", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["avoidableCost"] is None


def test_diagnose_prices_an_input_bound_job_in_usd(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = running_job(store, STARTED, name="slow")  # 1 USD an hour, 2 hours so far
    _steps(store, job_id, 0.3, 0.7)
    assert main(["diagnose", job_id, "-o", "json"]) == 0
    found = {f["code"]: f for f in json.loads(capsys.readouterr().out)}
    entry = found["input-bound"]
    spent = entry["priced_over"]["month_spend_usd"]
    assert spent == pytest.approx(2.0, rel=0.01)
    assert entry["month_usd"] == pytest.approx(0.3 * spent, rel=1e-4)
    assert entry["remaining_usd"] is None  # no forecast yet (no controller measured its rate)
    assert found["gpu-not-measured"]["month_usd"] is None
    assert main(["diagnose", job_id]) == 0
    out = capsys.readouterr().out
    assert f"{entry['month_usd']:,.2f} USD of the last 30 days' spend" in out
    assert "fixes by what they save:" in out
    assert main(["status", job_id]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("avoidable spend"))
    assert "of team t's last 30 days" in line and "input-bound" in line and "GPU use not measured" in line


def test_a_compute_bound_job_has_nothing_avoidable(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = running_job(store, STARTED, name="busy")
    _steps(store, job_id, 0.001, 0.999)
    assert main(["diagnose", job_id, "-o", "json"]) == 0
    assert "input-bound" not in {f["code"] for f in json.loads(capsys.readouterr().out)}
    assert main(["status", job_id]) == 0
    assert "avoidable spend: none found; GPU use not measured" in capsys.readouterr().out


def test_right_size_ranks_on_the_same_list_in_diagnose_and_the_report(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs of one job measured the same step rate on a V100 and on an L4: moving to the L4 is a
    fix priced in USD like the input pipeline's, in `diagnose` and in the report's top fixes."""
    from dataclasses import replace

    from orchestrator.testing.states import SPOT

    v100 = running_job(store, STARTED, name="sized")
    l4 = running_job(
        store, STARTED, name="sized", placement=replace(SPOT, gpu_type="L4", instance_type="g2-standard-4")
    )
    for job_id in (v100, l4):
        _steps(store, job_id, 0.2, 0.8)
    assert main(["diagnose", v100, "-o", "json"]) == 0
    found = {f["code"]: f for f in json.loads(capsys.readouterr().out)}
    moved = found["right-size"]
    assert "L4" in moved["fix"] and moved["bound"]["share"] > found["input-bound"]["bound"]["share"]
    assert moved["month_usd"] == pytest.approx(  # the document rounds USD to 6 decimals
        moved["bound"]["share"] * moved["priced_over"]["month_spend_usd"], abs=1e-6
    )
    assert main(["diagnose", v100]) == 0
    ranked = capsys.readouterr().out.split("fixes by what they save:")[1].splitlines()
    assert ranked[1].lstrip().startswith("right-size:") and ranked[2].lstrip().startswith("input-bound:")
    assert main(["cost", "report", "-o", "json"]) == 0
    top = [(f["job"], f["finding"]) for f in json.loads(capsys.readouterr().out)["topFixes"]]
    assert top[0] == (v100, "right-size") and (v100, "input-bound") in top


def test_a_tuned_job_is_diagnosed_on_its_new_steps_and_credited(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``tune`` progress record (``runtime: {tune: auto}``): the steps before it no longer count as
    input-bound, and status and the report credit the saving over the spend after it."""
    job_id = running_job(store, STARTED, name="tuned")  # 1 USD an hour since 2 hours ago
    tuned_at = STARTED + timedelta(hours=1)

    def step(s: int, at: datetime, data: float, compute: float) -> str:
        return json.dumps({"time": at.isoformat(), "step": s, "data_s": data, "compute_s": compute})

    tune = {"time": tuned_at.isoformat(), "event": "tuned", "step": 20,
            "tune": {"before_step_s": 0.3, "after_step_s": 0.2, "settings": {"num_workers": 4}}}  # fmt: skip
    write_lines(store.job_dir(job_id) / "progress.jsonl", [
        *(step(s, STARTED + timedelta(seconds=s), 0.1, 0.2) for s in range(1, 20)), json.dumps(tune),
        *(step(s, tuned_at + timedelta(seconds=s), 0.001, 0.2) for s in range(21, 40)),
    ])  # fmt: skip
    assert main(["diagnose", job_id, "-o", "json"]) == 0
    assert "input-bound" not in {f["code"] for f in json.loads(capsys.readouterr().out)}
    assert main(["status", job_id, "-o", "json"]) == 0
    saved = json.loads(capsys.readouterr().out)["avoidable"]["saved_by_tuning_usd"]
    assert saved == pytest.approx(1.0 * (0.3 / 0.2 - 1), rel=0.02)  # 1 USD after it, at 1.5x the step time
    assert main(["status", job_id]) == 0
    assert "saved by tuning 0.5" in capsys.readouterr().out
    assert main(["cost", "report", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["tuningSavings"] == pytest.approx(saved, rel=0.02)
