from __future__ import annotations

import json
from pathlib import Path

from orchestrator.costs.lost_work import lost_work_from_progress


def _line(**doc: object) -> str:
    return json.dumps(doc)


def test_steps_redone_after_each_resume_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    lines = [_line(time=f"2026-11-22T12:00:{s:02d}+00:00", step=s) for s in range(1, 26)]
    lines.append(_line(event="resumed", step=20))  # checkpoint at 20, reached 25: 5 steps redone
    lines += [_line(time=f"2026-11-22T12:01:{s:02d}+00:00", step=s) for s in range(21, 41)]
    lines.append(_line(event="resumed", step=40))  # a notice checkpoint: nothing redone
    lines.append('{"time": "2026-11-22T12:02')  # torn last line
    path.write_text("\n".join(lines))
    lost = lost_work_from_progress(path)
    assert lost is not None and lost.steps == 5 and lost.seconds_per_step == 1.0


def test_missing_file_means_unknown(tmp_path: Path) -> None:
    assert lost_work_from_progress(tmp_path / "nope.jsonl") is None


def test_report_inputs_take_idle_hours_from_monitor_summaries(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from orchestrator.cli.cost_cmd import load_report_inputs
    from orchestrator.state.store import JobStore

    store = JobStore(tmp_path)
    job = store.create_job(name="j", user="u", team="t", backend="local", spec_json="{}", deadline=None,
                           now=datetime.now(UTC))  # fmt: skip
    window = {
        "kind": "gpuctl.monitor.window", "start": 0.0, "duration_s": 1800.0, "gpus": 1, "util_mean_pct": 0.0,
        "util_p95_pct": 0.0, "util_max_pct": 0.0, "mem_used_max_bytes": 0, "mem_total_bytes": 2**34,
        "idle_seconds": 1800.0,
    }  # fmt: skip
    for node in ("n0", "n1"):
        (store.job_dir(job.id) / f"monitor-summary-{node}.jsonl").write_text(json.dumps(window) + "\n")
    inputs = load_report_inputs(tmp_path)
    assert inputs.idle == {job.id: 1.0}
