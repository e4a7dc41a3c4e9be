"""The right-size policy's measurement from stored monitor windows and the progress file."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.catalog.offers import MarketKind
from orchestrator.controller.measurement import measured_gpu, steps_per_second
from orchestrator.policies.rightsize import right_size
from orchestrator.spec import load_spec_text
from orchestrator.state.store import JobStore, StoreWrites
from orchestrator.state.usage import UsageStore

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
PLACEMENT = {
    "gpu_type": "H100", "market": "spot", "cloud": "aws", "region": "us-east-1", "zone": "us-east-1a",
    "instance_type": "p5.48xlarge", "gpus_per_node": 8, "node_price_usd_per_hour": 30.0,
    "on_demand_node_price_usd_per_hour": 98.0, "price_source": "test",
}  # fmt: skip


def window(start: float) -> str:
    return json.dumps({
        "kind": "gpuctl.monitor.window", "start": start, "duration_s": 60.0, "gpus": 8, "model": "NVIDIA H100",
        "util_mean_pct": 35.0, "util_p95_pct": 50.0, "util_max_pct": 60.0, "mem_used_max_bytes": 18 * 2**30,
        "mem_total_bytes": 80 * 2**30, "sm_activity_mean": 0.3, "idle_seconds": 0.0,
        "per_gpu": [{"samples": 60}] * 8,
    }) + "\n"  # fmt: skip


def test_measurement_from_windows_and_progress(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    spec = load_spec_text("name: m\ncommand: train.py\npolicies: {global_batch: 256}\n")
    job = store.create_job(name="m", user="u", team="t", backend="local", spec_json=spec.model_dump_json(),
                           deadline=None, now=NOW)  # fmt: skip
    assert measured_gpu(store, job.id) is None
    with store.transaction() as conn:
        StoreWrites.open_segment(conn, job.id, 1, PLACEMENT, 2, NOW)
    job_dir = store.job_dir(job.id)
    (job_dir / "monitor-summary-n0.jsonl").write_text(window(0.0) + window(60.0))
    UsageStore(store).ingest(job.id, NOW)
    assert measured_gpu(store, job.id) is None, "no step rate yet"
    before = json.dumps({"time": (NOW - timedelta(seconds=30)).isoformat(), "step": 1})  # an older segment
    lines = [
        json.dumps({"time": (NOW + timedelta(seconds=10 * i)).isoformat(), "step": 100 + 20 * i})
        for i in range(4)
    ]
    (job_dir / "progress.jsonl").write_text("\n".join([before, *lines, '{"event": "finished"}']) + "\n")
    assert steps_per_second(job_dir / "progress.jsonl", NOW) == pytest.approx(2.0)
    got = measured_gpu(store, job.id)
    assert got is not None and got.gpu_type == "H100"
    assert got.units_per_second_per_gpu == pytest.approx(2.0 * 256 / 16)
    assert got.peak_memory_gib == 18.0 and got.utilization == 0.35
    choice = right_size([got], work_units=1e6, deadline_h=100.0, market=MarketKind.ON_DEMAND)
    assert "only 35%" in choice.reason  # the policy reads the measured utilization
    assert measured_gpu(store, job.id, units_per_second_per_gpu=7.0).units_per_second_per_gpu == 7.0  # type: ignore[union-attr]
