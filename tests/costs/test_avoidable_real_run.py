"""Real runs under torchrun on the local backend: an input-bound script (its dataset sleeps per item) is
named input-bound by `gpuctl diagnose` with its measured wait share and a USD figure that matches a hand
computation within 2 %; a compute-bound script gets no such finding (issue 34, 1 and 3)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.controller.conftest import Gpuctl, write_job
from tests.controller.test_local_jobs import _kill_controller

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
SCRIPT = Path(__file__).parent / "fixtures" / "loader_bound.py"


def _wait_share(progress: Path) -> float:
    """The hand computation of the wait share: data time over step time, the first step left out."""
    steps = [json.loads(line) for line in progress.read_text().splitlines() if '"data_s"' in line]
    steps = steps[1:]
    data = sum(s["data_s"] for s in steps)
    return float(data / (data + sum(s["compute_s"] for s in steps)))


def _diagnose(gpuctl: Gpuctl, job: str) -> dict[str, dict[str, Any]]:
    found = json.loads(gpuctl.run("diagnose", job, "-o", "json").stdout)
    return {entry["code"]: entry for entry in found}


def _wait_until(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_an_input_bound_job_is_priced_and_a_compute_bound_one_is_not(gpuctl: Gpuctl, tmp_path: Path) -> None:
    slow = write_job(tmp_path, "loaderbound", f"command: {SCRIPT} 90 0.025 0.1\nresources: {{nodes: 1}}\n")
    fast = write_job(tmp_path, "computebound", f"command: {SCRIPT} 20 0 0.1\nresources: {{nodes: 1}}\n")
    try:
        job = gpuctl.run("submit", str(slow), "--detach").stdout.strip()
        running = gpuctl.wait_for(job, lambda d: d["state"] == "RUNNING" and d.get("forecast") is not None
                                  and (d.get("progress") or {}).get("step", 0) >= 10, timeout=180)  # fmt: skip
        # While it runs: the figure over the remaining work is the wait share of what the rest costs.
        live = _diagnose(gpuctl, job)["input-bound"]
        assert live["remaining_usd"] is not None and live["remaining_usd"] > 0, live
        assert live["remaining_usd"] == pytest.approx(
            live["bound"]["share"] * live["priced_over"]["remaining_work_usd"], rel=1e-3
        )
        hourly = running["segments"][-1]["node_price_usd_per_hour"] * running["segments"][-1]["nodes"]
        assert live["priced_over"]["hourly_usd"] == pytest.approx(hourly, rel=1e-6)

        done = gpuctl.wait_for(job, lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=240)
        assert done["state"] == "SUCCEEDED", done
        other = gpuctl.run("submit", str(fast), "--detach").stdout.strip()
        finished = gpuctl.wait_for(other, lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=240)
        assert finished["state"] == "SUCCEEDED", finished
    finally:
        _kill_controller(gpuctl.home)

    share = _wait_share(gpuctl.home / "jobs" / job / "progress.jsonl")
    assert 0.3 < share < 0.7, share  # 4 items x 25 ms against 100 ms of compute: about half
    found = _diagnose(gpuctl, job)["input-bound"]
    assert found["evidence"]["data_fraction"] == pytest.approx(share, abs=1e-4)
    assert found["bound"]["speedup"] == pytest.approx(1 / (1 - share), rel=1e-3)
    # The hand computation: measured wait share x what the job paid (its price x the hours it ran).
    paid = sum(
        seg["node_price_usd_per_hour"] * seg["nodes"] * _hours(seg["started_at"], seg["ended_at"])
        for seg in done["segments"]
    )
    assert found["month_usd"] == pytest.approx(share * paid, rel=0.02)
    assert found["remaining_usd"] == 0  # it finished: nothing left to save on
    text = gpuctl.run("diagnose", job).stdout
    assert f"{round(100 * share)} % of step time waiting for data" in text
    assert f"{found['month_usd']:,.2f} USD" in text

    codes = _diagnose(gpuctl, other)
    assert "input-bound" not in codes, codes
    report = json.loads(gpuctl.run("cost", "report", "-o", "json").stdout)
    rows = {r["name"]: r for r in report["rows"]}
    assert rows[job]["avoidableCost"] == pytest.approx(found["month_usd"], rel=0.02)
    assert rows[other]["avoidableCost"] == 0
    assert [f["finding"] for f in report["topFixes"] if f["job"] == job] == ["input-bound"]


def _hours(start: str, end: str) -> float:
    from orchestrator.times import parse_iso

    return (parse_iso(end) - parse_iso(start)).total_seconds() / 3600.0
