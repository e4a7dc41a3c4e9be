"""``runtime: {tune: auto}`` for real: torchrun on the local backend, two ranks, a dataset that sleeps
per item. The input-bound job's steps get at least a third faster, its progress records carry the
before/after and the cost report credits the saving; a compute-bound job is left as it is."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from orchestrator.contract import ProgressRecord, read_progress_records
from tests.controller.conftest import REPO, Gpuctl, write_job

pytestmark = pytest.mark.slow

TRAIN = REPO / "examples" / "tune" / "train.py"


def _run(gpuctl: Gpuctl, folder: Path, name: str, args: str) -> tuple[str, list[ProgressRecord]]:
    job = write_job(folder, name, f"command: {TRAIN} {args}\nresources: {{gpus_per_node: 2}}\n"
                    "runtime: {tune: auto}\n")  # fmt: skip
    gpuctl.run("submit", str(job), timeout=600)
    doc = json.loads(gpuctl.run("list", "-o", "json").stdout)
    [job_id] = [d["id"] for d in doc if d["name"] == name]
    assert next(d for d in doc if d["id"] == job_id)["state"] == "SUCCEEDED"
    return job_id, read_progress_records(gpuctl.home / "jobs" / job_id / "progress.jsonl")


def _tuning_savings(gpuctl: Gpuctl) -> dict[str, float | None]:
    """The cost report's ``tuningSavings`` by job row (the row's name holds the job's name)."""
    doc = json.loads(gpuctl.run("cost", "report", "--by", "job", "-o", "json").stdout)
    return {row["name"]: row["tuningSavings"] for row in doc["rows"]}


def _mean_interval(records: list[ProgressRecord], first: int, last: int) -> float:
    """Mean wall seconds per step from the step records' times, over steps ``first..last``."""
    times = {r.step: r.time for r in records if r.is_step and r.time is not None}
    gaps = [(times[s] - times[s - 1]).total_seconds() for s in range(first, last + 1)]
    return statistics.fmean(gaps)


def test_an_input_bound_job_is_tuned_and_a_compute_bound_one_is_not(gpuctl: Gpuctl, tmp_path: Path) -> None:
    tuned_id, records = _run(gpuctl, tmp_path, "inputbound", "--steps 90 --item-ms 30")
    [tuned] = [r for r in records if r.event == "tuned"]
    assert tuned.tune is not None and tuned.step is not None
    assert tuned.tune.after_step_s <= tuned.tune.before_step_s * 2 / 3, tuned.fields
    assert int(tuned.tune.settings["num_workers"]) > 0
    assert float(tuned.fields["data_wait_share"]) > 0.5
    before = _mean_interval(records, 4, 8)  # the baseline's timed steps (2 of warmup)
    after = _mean_interval(records, tuned.step + 2, 90)
    assert after <= before * 2 / 3, (before, after)
    assert next(r for r in records if r.event == "finished").step == 90

    untouched_id, records = _run(gpuctl, tmp_path, "computebound", "--steps 40 --item-ms 0 --compute-ms 60")
    assert not [r for r in records if r.tune is not None or r.event == "tuned"]
    [kept] = [r for r in records if r.event == "tune_unchanged"]
    assert float(kept.fields["data_wait_share"]) < 0.5, kept.fields
    assert next(r for r in records if r.event == "finished").step == 40

    savings = _tuning_savings(gpuctl)
    [credited] = [usd for name, usd in savings.items() if "inputbound" in name or tuned_id in name]
    [uncredited] = [usd for name, usd in savings.items() if "computebound" in name or untouched_id in name]
    assert credited is not None and credited > 0, savings  # the steps after the tune, priced at the old time
    assert not uncredited, savings
