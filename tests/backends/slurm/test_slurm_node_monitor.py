"""The SLURM node wrapper's GPU monitor: rendered quoted, run by bash as a task would run it (no cluster):
the launcher's exit code passes through, the monitor writes its summary and is gone afterwards, and a
missing NVML is one line in the job log."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.backends.base import LaunchRequest
from orchestrator.backends.monitoring import MonitorSettings
from orchestrator.backends.slurm import SlurmClusterConfig, render_batch_job
from orchestrator.backends.slurm.placements import request_for
from orchestrator.backends.slurm.script import node_wrapper
from orchestrator.monitor.summary import UNAVAILABLE_KIND, read_summaries
from orchestrator.spec import load_spec_text

REPO = Path(__file__).resolve().parents[3]
REPLAY = REPO / "tests" / "data" / "monitor" / "h100x8_synthetic.jsonl"
PYTHON_MONITOR = (sys.executable, "-m", "orchestrator.monitor")


def request(tmp_path: Path, job_dir_name: str = "job dir $(id)") -> LaunchRequest:
    spec = load_spec_text(f"name: t\ncommand: train.py\nworkdir: {tmp_path}\n")
    req = request_for(spec, "t-1", tmp_path / job_dir_name, SlurmClusterConfig())
    req.job_dir.mkdir()
    return req


def test_rendered_wrapper_quotes_every_value_and_off_keeps_exec(tmp_path: Path) -> None:
    req = request(tmp_path)
    settings = MonitorSettings(source=f"replay:{tmp_path}/it's here.jsonl", command=PYTHON_MONITOR)
    wrapper = node_wrapper(req, settings)
    assert shlex.quote(str(req.job_dir / "monitor-summary-")) + '"$SLURMD_NODENAME".jsonl' in wrapper
    assert shlex.quote(f"{tmp_path}/it's here.jsonl") in wrapper
    assert "--job=t-1" in wrapper and "--port=0" in wrapper and '--notify-pid="$trainer"' in wrapper
    script = render_batch_job(req, SlurmClusterConfig(), settings).script
    assert shlex.quote(wrapper) in script
    off = node_wrapper(req, MonitorSettings(source="off"))
    assert 'exec "$@"\n' in off and "monitor" not in off
    env_default = render_batch_job(req, SlurmClusterConfig()).script  # GPUCTL_MONITOR_SOURCE unset: nvml
    assert "orchestrator.monitor" in env_default


def test_node_monitor_listens_on_loopback_unless_told(tmp_path: Path) -> None:
    req = request(tmp_path)
    assert "--addr=127.0.0.1" in node_wrapper(req, MonitorSettings.from_env({}))
    assert "0.0.0.0" not in node_wrapper(req, MonitorSettings.from_env({}))
    scraped = MonitorSettings.from_env({"GPUCTL_MONITOR_ADDR": "0.0.0.0"})
    assert "--addr=0.0.0.0" in node_wrapper(req, scraped)


def run_node(
    tmp_path: Path, settings: MonitorSettings, argv: list[str]
) -> tuple[subprocess.CompletedProcess[str], Path]:
    req = request(tmp_path, "job")
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLURMD_NODENAME": "node1", "GPUCTL_JOB_ID": "t-1"}
    done = subprocess.run(
        ["bash", "-c", node_wrapper(req, settings), "gpuctl-node", *argv],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return done, req.job_dir


def monitors_of(job_dir: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(job_dir).encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_monitor_runs_beside_the_launcher_and_is_stopped_after_it(tmp_path: Path) -> None:
    settings = MonitorSettings(
        source=f"replay:{REPLAY}", interval="0.1s", window="5s", port=-1, command=PYTHON_MONITOR
    )
    done, job_dir = run_node(tmp_path, settings, ["bash", "-c", "sleep 2; exit 7"])
    assert done.returncode == 7, done.stderr
    windows = read_summaries(job_dir / "monitor-summary-node1.jsonl")
    assert windows and windows[0]["job_id"] == "t-1"
    time.sleep(0.2)
    assert monitors_of(job_dir) == []
    assert "no NVML" not in done.stdout + done.stderr


@pytest.mark.slow
def test_no_nvml_costs_one_line_not_the_step(tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    settings = MonitorSettings(source="nvml", port=-1, command=PYTHON_MONITOR)
    done, job_dir = run_node(tmp_path, settings, ["bash", "-c", "sleep 2"])
    assert done.returncode == 0, done.stderr
    lines = (job_dir / "monitor-summary-node1.jsonl").read_text()
    if UNAVAILABLE_KIND not in lines:
        pytest.skip("this machine has NVML")
    # the node's output (standard error included) reaches the job log timed
    assert done.stdout.count("Z\tgpuctl: GPU monitor: no NVML on node1; utilization not measured\n") == 1
    assert "gpuctl monitor: error:" in (job_dir / "monitor-node1.log").read_text()
