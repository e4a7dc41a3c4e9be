"""GPU monitors on local nodes, end to end: a replayed job's windows are stored and shown by `gpuctl status`,
a job without NVML still succeeds with one event, and no monitor outlives its job."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from orchestrator.state.store import JobStore
from orchestrator.state.usage import NO_NVML_MESSAGE, UsageStore
from tests.controller.conftest import TINY, Gpuctl, write_job
from tests.controller.test_local_jobs import _kill_controller, _wait_no_node_processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
REPLAY = Path(__file__).resolve().parents[1] / "data" / "monitor" / "h100x8_synthetic.jsonl"


def test_monitors_are_stored_shown_and_gone_after_the_job(gpuctl: Gpuctl, tmp_path: Path) -> None:
    gpuctl.env.update(GPUCTL_MONITOR_INTERVAL="0.25s", GPUCTL_MONITOR_WINDOW="5s")
    replayed = write_job(tmp_path, "replayed", f"command: {TINY} 24 0.3\nresources: {{nodes: 1}}\n")
    no_nvml = write_job(tmp_path, "nonvml", f"command: {TINY} 8 0.3\nresources: {{nodes: 1}}\n")
    try:
        a = gpuctl.run(
            "submit", str(replayed), "--detach", "--monitor-source", f"replay:{REPLAY}"
        ).stdout.strip()
        b = gpuctl.run("submit", str(no_nvml), "--detach", "--monitor-source", "nvml").stdout.strip()
        for job in (a, b):
            gpuctl.wait_for(job, lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=90)
        time.sleep(2.5)  # the controller keeps ticking ended jobs; give it a tick or two
        doc = gpuctl.status(a)
    finally:
        _kill_controller(gpuctl.home)
    assert doc["state"] == "SUCCEEDED"
    usage = doc["gpu_usage"]
    assert usage is not None, doc
    assert usage["model"] == "NVIDIA H100 80GB HBM3" and usage["samples"] > 0 and usage["monitors"] == 1
    assert 0 < usage["util_mean_pct"] <= usage["util_p95_pct"] <= usage["util_max_pct"] <= 100

    store = JobStore(gpuctl.home)
    summary = gpuctl.home / "jobs" / a / f"monitor-summary-{a}-a1-n0.jsonl"
    written = [json.loads(line) for line in summary.read_text().splitlines()]
    assert written and all(w["job_id"] == a for w in written)
    assert len(UsageStore(store).windows(a)) == len(written), "every window stored, none twice"
    assert sum(w["samples"] for r in written for w in r["per_gpu"]) == usage["samples"]

    for job in (a, b):
        _wait_no_node_processes(gpuctl.home / "jobs" / job, timeout=10)
    other = gpuctl.status(b)
    assert other["state"] == "SUCCEEDED"
    if other["gpu_usage"] is not None:
        pytest.skip("this machine has NVML: the no-NVML path cannot be seen here")
    events = [e.message for e in store.events(b) if e.kind == "gpu_monitor"]
    assert events == [NO_NVML_MESSAGE]
    assert gpuctl.run("logs", b).stdout.count("gpuctl: GPU monitor: no NVML on this machine") == 1
