"""``runtime: {tune: auto}`` for real: torchrun on the local backend, two ranks, a dataset that sleeps
per item. The input-bound job's steps get at least a third faster and its progress records carry the
before/after; a compute-bound job is left as it is."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from orchestrator.contract import ProgressRecord, read_progress_records
from tests.controller.conftest import REPO, Gpuctl, write_job

pytestmark = pytest.mark.slow

TRAIN = REPO / "examples" / "tune" / "train.py"


def _run(gpuctl: Gpuctl, folder: Path, name: str, args: str) -> list[ProgressRecord]:
    job = write_job(folder, name, f"command: {TRAIN} {args}\nresources: {{gpus_per_node: 2}}\n"
                    "runtime: {tune: auto}\n")  # fmt: skip
    gpuctl.run("submit", str(job), timeout=600)
    doc = json.loads(gpuctl.run("list", "-o", "json").stdout)
    [job_id] = [d["id"] for d in doc if d["name"] == name]
    assert next(d for d in doc if d["id"] == job_id)["state"] == "SUCCEEDED"
    return read_progress_records(gpuctl.home / "jobs" / job_id / "progress.jsonl")


def _mean_interval(records: list[ProgressRecord], first: int, last: int) -> float:
    """Mean wall seconds per step from the step records' times, over steps ``first..last``."""
    times = {r.step: r.time for r in records if r.is_step and r.time is not None}
    gaps = [(times[s] - times[s - 1]).total_seconds() for s in range(first, last + 1)]
    return statistics.fmean(gaps)


def test_an_input_bound_job_is_tuned_and_a_compute_bound_one_is_not(gpuctl: Gpuctl, tmp_path: Path) -> None:
    records = _run(gpuctl, tmp_path, "inputbound", "--steps 90 --item-ms 30")
    [tuned] = [r for r in records if r.event == "tuned"]
    assert tuned.tune is not None and tuned.step is not None
    assert tuned.tune.after_step_s <= tuned.tune.before_step_s * 2 / 3, tuned.fields
    assert int(tuned.tune.settings["num_workers"]) > 0
    assert float(tuned.fields["data_wait_share"]) > 0.5
    before = _mean_interval(records, 4, 8)  # the baseline's timed steps (2 of warmup)
    after = _mean_interval(records, tuned.step + 2, 90)
    assert after <= before * 2 / 3, (before, after)
    assert next(r for r in records if r.event == "finished").step == 90

    records = _run(gpuctl, tmp_path, "computebound", "--steps 40 --item-ms 0 --compute-ms 60")
    assert not [r for r in records if r.tune is not None or r.event == "tuned"]
    [kept] = [r for r in records if r.event == "tune_unchanged"]
    assert float(kept.fields["data_wait_share"]) < 0.5, kept.fields
    assert next(r for r in records if r.event == "finished").step == 40
