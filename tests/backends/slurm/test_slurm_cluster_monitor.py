"""On the real single-node SLURM cluster: the node's GPU monitor (replay source) writes its summary file
beside the job and is gone when the job ends."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.backends.base import NodePhase
from orchestrator.backends.slurm import SlurmBackend, SlurmClusterConfig
from orchestrator.monitor.summary import read_summaries
from tests.backends.slurm.test_slurm_cluster import finished, make_request, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
REPO = Path(__file__).resolve().parents[3]
REPLAY = REPO / "tests" / "data" / "monitor" / "h100x8_synthetic.jsonl"


def test_node_monitor_writes_its_summary(
    backend: SlurmBackend, cluster_config: SlurmClusterConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # sbatch passes the environment on to the job
    monkeypatch.setenv("GPUCTL_MONITOR_SOURCE", f"replay:{REPLAY}")
    monkeypatch.setenv("GPUCTL_MONITOR_COMMAND", f"{sys.executable} -m orchestrator.monitor")
    monkeypatch.setenv("GPUCTL_MONITOR_INTERVAL", "0.2s")
    monkeypatch.setenv("GPUCTL_MONITOR_WINDOW", "5s")
    req = make_request(tmp_path, cluster_config, "mon", steps=20)
    backend.launch(req)
    obs = wait_until(backend, req, finished)
    assert obs.nodes[0].phase is NodePhase.SUCCEEDED and obs.nodes[0].exit_code == 0
    [summary] = req.job_dir.glob("monitor-summary-*.jsonl")
    windows = read_summaries(summary)
    assert windows and all(w["job_id"] == req.job_id for w in windows)
    assert sum(w["gpus"] for w in windows[:1]) == 8
    log = next(req.job_dir.glob("monitor-*.log")).read_text()
    assert "stopped after" in log, log
