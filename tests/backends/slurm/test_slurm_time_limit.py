"""An attempt's ``--time``: the time left to the deadline resolved at admission, else the cluster default."""

from __future__ import annotations

import dataclasses
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from orchestrator.backends.base import LaunchRequest
from orchestrator.backends.slurm import SlurmClusterConfig, commands, render_batch_job
from orchestrator.backends.slurm.placements import request_for
from orchestrator.backends.slurm.time_limit import format_time_limit, slurm_time_seconds
from orchestrator.spec import load_spec_text

SUBMITTED = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
CONFIG = SlurmClusterConfig(time_limit="24:00:00")


def request(tmp_path: Path, attempt: int = 1, **goals: object) -> LaunchRequest:
    text = yaml.safe_dump({"name": "train", "command": "train.py", "goals": goals})
    spec = load_spec_text(text, now=SUBMITTED)
    return request_for(spec, "train-1", tmp_path, CONFIG, attempt=attempt, now=SUBMITTED)


def time_option(script: str) -> str:
    return next(line for line in script.splitlines() if line.startswith("#SBATCH --time="))


def test_a_retry_after_a_preemption_asks_for_the_time_left_to_the_deadline(tmp_path: Path) -> None:
    first = request(tmp_path, deadline="36h")
    retry = request(tmp_path, attempt=2, deadline="36h")
    at_start = render_batch_job(first, CONFIG, requeue_on_notice=False, now=SUBMITTED)
    later = SUBMITTED + timedelta(hours=30)
    after_preemption = render_batch_job(retry, CONFIG, requeue_on_notice=False, now=later)
    assert time_option(at_start.script) == "#SBATCH --time=1-12:00:00"
    assert time_option(after_preemption.script) == "#SBATCH --time=0-06:00:00"
    assert after_preemption.note is None


def test_an_absolute_deadline_sets_the_time_limit_too(tmp_path: Path) -> None:
    req = request(tmp_path, deadline="2026-12-01T00:00Z")
    batch = render_batch_job(req, CONFIG, now=datetime(2026, 11, 30, 18, 0, tzinfo=UTC))
    assert time_option(batch.script) == "#SBATCH --time=0-06:00:00"


def test_the_time_left_is_rounded_up_to_a_minute_and_never_below_one(tmp_path: Path) -> None:
    req = request(tmp_path, deadline="2h")
    deadline = SUBMITTED + timedelta(hours=2)
    late = render_batch_job(req, CONFIG, now=deadline - timedelta(seconds=61))
    past = render_batch_job(req, CONFIG, now=deadline + timedelta(hours=1))
    assert time_option(late.script) == "#SBATCH --time=0-00:02:00"
    assert time_option(past.script) == "#SBATCH --time=0-00:01:00"


def test_without_a_deadline_the_cluster_default_applies_and_is_said_when_shorter_than_the_work(
    tmp_path: Path,
) -> None:
    short = render_batch_job(request(tmp_path, compute_hours=10), CONFIG, now=SUBMITTED)
    long = render_batch_job(request(tmp_path, compute_hours=30), CONFIG, now=SUBMITTED)
    assert time_option(short.script) == "#SBATCH --time=24:00:00" and short.note is None
    assert time_option(long.script) == "#SBATCH --time=24:00:00"
    assert long.note is not None and "default time limit (24:00:00" in long.note and "30 h" in long.note
    assert f"echo {shlex.quote('gpuctl: warning: ' + long.note)} >&2\n" in long.script  # in its output


def test_a_partition_limit_shorter_than_the_time_left_caps_it_and_is_said(tmp_path: Path) -> None:
    req = request(tmp_path, deadline="36h")
    capped = render_batch_job(req, CONFIG, now=SUBMITTED, partition_limit="1-00:00:00")
    roomy = render_batch_job(req, CONFIG, now=SUBMITTED, partition_limit="infinite")
    assert time_option(capped.script) == "#SBATCH --time=1-00:00:00"
    assert capped.note is not None and "partition's time limit (1-00:00:00)" in capped.note
    assert "36h00m00s left" in capped.note
    assert time_option(roomy.script) == "#SBATCH --time=1-12:00:00" and roomy.note is None


def test_a_request_without_a_resolved_deadline_gets_the_cluster_default(tmp_path: Path) -> None:
    req = dataclasses.replace(request(tmp_path, deadline="36h"), deadline=None)
    batch = render_batch_job(req, CONFIG, now=SUBMITTED)
    assert time_option(batch.script) == "#SBATCH --time=24:00:00"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800.0),
        ("30:15", 1815.0),
        ("24:00:00", 86400.0),
        ("2-00", 172800.0),
        ("2-03:04", 183840.0),
        ("1-00:00:01", 86401.0),
        ("infinite", None),
        ("UNLIMITED", None),
        ("soon", None),
    ],
)
def test_slurm_times(text: str, seconds: float | None) -> None:
    assert slurm_time_seconds(text) == seconds


def test_format_time_limit_round_trips_through_slurm_time() -> None:
    assert slurm_time_seconds(format_time_limit(6 * 3600 - 30)) == 6 * 3600


def test_the_partition_limit_is_read_from_sinfo(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def sinfo(argv: list[str]) -> str:
        seen.append(list(argv))
        return (
            "debug|30:00\nbatch*|1-00:00:00\n" if "--partition=preempt" not in argv else "preempt|2:00:00\n"
        )

    monkeypatch.setattr(commands, "run_slurm", sinfo)
    assert commands.partition_time_limit(None) == "1-00:00:00"  # the default partition's
    assert commands.partition_time_limit("preempt") == "2:00:00"
    assert seen[-1] == ["sinfo", "--noheader", "--format=%P|%l", "--partition=preempt"]
