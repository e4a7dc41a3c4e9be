"""The local node runner's GPU monitor: started beside the trainer, stopped after it, killed with the node,
and a missing NVML costs one log line, never the node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator import contract
from orchestrator.backends.local.backend import _kill_node, _pythonpath
from orchestrator.backends.monitoring import MonitorSettings
from orchestrator.monitor.summary import UNAVAILABLE_KIND, read_summaries

pytestmark = pytest.mark.slow
REPLAY = Path(__file__).resolve().parents[2] / "data" / "monitor" / "h100x8_synthetic.jsonl"


def monitor_pids(node_id: str) -> list[int]:
    """Live monitor processes carrying this node's id."""
    found = []
    marker = f"{contract.ENV_NODE_ID}={node_id}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if b"orchestrator.monitor" not in (proc / "cmdline").read_bytes():
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def start_runner(
    tmp_path: Path, node_id: str, source: str, command: list[str]
) -> tuple[subprocess.Popen[bytes], Path]:
    node_dir = tmp_path / "job" / "attempt-1" / node_id
    node_dir.mkdir(parents=True)
    settings = MonitorSettings(source=source, interval="0.1s", window="5s", port=-1)
    env = {**os.environ, contract.ENV_NODE_ID: node_id, "PYTHONPATH": _pythonpath()}
    env.pop("GPUCTL_JOB_ID", None)
    argv = [sys.executable, "-m", "orchestrator.backends.local.node_runner", str(node_dir),
            "--monitor", json.dumps(settings.local_argv("job-x")), "--", *command]  # fmt: skip
    log = open(node_dir / "output.log", "ab")  # noqa: SIM115 - closed when the runner ends
    proc = subprocess.Popen(argv, env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc, node_dir


def wait_for(predicate: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_monitor_runs_beside_the_trainer_and_stops_after_it(tmp_path: Path) -> None:
    node = "job-x-a1-n0"
    proc, node_dir = start_runner(
        tmp_path, node, f"replay:{REPLAY}", [sys.executable, "-c", "import time; time.sleep(3)"]
    )
    wait_for(lambda: monitor_pids(node))
    assert proc.wait(timeout=30) == 0
    assert (node_dir / "exit_code").read_text() == "0"
    assert monitor_pids(node) == [], "the monitor outlived its node"
    windows = read_summaries(tmp_path / "job" / f"monitor-summary-{node}.jsonl")
    assert windows and windows[0]["job_id"] == "job-x" and windows[0]["gpus"] == 8
    assert "gpuctl: GPU monitor" not in (node_dir / "output.log").read_text()


def test_killing_the_node_kills_its_monitor(tmp_path: Path) -> None:
    node = "job-x-a1-n1"
    proc, _ = start_runner(
        tmp_path, node, f"replay:{REPLAY}", [sys.executable, "-c", "import time; time.sleep(60)"]
    )
    wait_for(lambda: monitor_pids(node))
    _kill_node(proc.pid, node)
    proc.wait(timeout=10)
    wait_for(lambda: not monitor_pids(node), timeout=5)


def test_no_nvml_costs_one_line_not_the_node(tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    node = "job-x-a1-n2"
    proc, node_dir = start_runner(
        tmp_path, node, "nvml", [sys.executable, "-c", "import time; time.sleep(4)"]
    )
    assert proc.wait(timeout=30) == 0
    if read_summaries(tmp_path / "job" / f"monitor-summary-{node}.jsonl"):
        pytest.skip("this machine has NVML and a GPU")
    assert (node_dir / "exit_code").read_text() == "0"
    output = (node_dir / "output.log").read_text()
    assert output.count("gpuctl: GPU monitor: no NVML on this machine; utilization not measured") == 1
    lines = (tmp_path / "job" / f"monitor-summary-{node}.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == [UNAVAILABLE_KIND]
    assert "gpuctl monitor: error:" in (node_dir / "monitor.log").read_text()
