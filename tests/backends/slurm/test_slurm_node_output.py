"""A SLURM node's output goes through the timed writer (issue 32, item 4), run by bash as a task would
run it (no cluster): every line timed, the launcher's exit code kept exactly, the signals SLURM sends
the step's process group still reach the launcher and its last lines are written, a writer that
cannot run costs one line, and a process left holding the output does not hold the node."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.backends.monitoring import MonitorSettings
from orchestrator.backends.output_log import split_time
from orchestrator.backends.slurm import SlurmClusterConfig
from orchestrator.backends.slurm import script as batch_script
from orchestrator.backends.slurm.placements import request_for
from orchestrator.spec import load_spec_text

REPO = Path(__file__).resolve().parents[3]
REPLAY = REPO / "tests" / "data" / "monitor" / "h100x8_synthetic.jsonl"
PYTHON_MONITOR = (sys.executable, "-m", "orchestrator.monitor")
OFF = MonitorSettings(source="off", command=PYTHON_MONITOR)
WITH_MONITOR = MonitorSettings(source=f"replay:{REPLAY}", interval="0.1s", port=-1, command=PYTHON_MONITOR)
SETTINGS = [
    pytest.param(OFF, id="no-monitor"),
    pytest.param(WITH_MONITOR, id="monitor", marks=pytest.mark.slow),
]
NOTICED = """\
import signal, sys, time
def notice(*_):
    print("gpuctl: preemption notice (SIGTERM): checkpoint saved", flush=True)
    sys.exit(75)
signal.signal(signal.SIGTERM, notice)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Wrappers started in their own process group (as slurmstepd starts a task): killed afterwards."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def start(
    tmp_path: Path, settings: MonitorSettings, argv: list[str], procs: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    spec = load_spec_text(f"name: t\ncommand: train.py\nworkdir: {tmp_path}\n")
    req = request_for(spec, "t-1", tmp_path / "job", SlurmClusterConfig())
    req.job_dir.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLURMD_NODENAME": "node1", "GPUCTL_JOB_ID": "t-1"}
    proc = subprocess.Popen(
        ["bash", "-c", batch_script.node_wrapper(req, settings), "gpuctl-node", *argv],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    procs.append(proc)
    return proc


def timed_lines(output: bytes) -> list[str]:
    lines = [split_time(line) for line in output.decode().splitlines()]
    assert all(when is not None for when, _ in lines), output
    return [text for _, text in lines]


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize("code", [0, 3, 75])
def test_every_line_is_timed_and_the_exit_code_is_the_launchers(
    tmp_path: Path, settings: MonitorSettings, code: int, started: list[subprocess.Popen[bytes]]
) -> None:
    launcher = [
        "bash",
        "-c",
        f"echo one; printf 'two, '; sleep 0.2; echo 'in pieces'; echo err >&2; exit {code}",
    ]
    proc = start(tmp_path, settings, launcher, started)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert timed_lines(output) == ["one", "two, in pieces", "err"]


@pytest.mark.parametrize("settings", SETTINGS)
def test_a_notice_to_the_process_group_reaches_the_launcher_and_its_last_lines_are_written(
    tmp_path: Path, settings: MonitorSettings, started: list[subprocess.Popen[bytes]]
) -> None:
    """scancel --signal=TERM signals every process of the step: the writer outlives the launcher."""
    proc = start(tmp_path, settings, [sys.executable, "-c", NOTICED], started)
    assert proc.stdout is not None
    assert proc.stdout.readline().endswith(b"\tready\n")
    os.killpg(proc.pid, signal.SIGTERM)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 75
    assert timed_lines(output) == ["gpuctl: preemption notice (SIGTERM): checkpoint saved"]


def test_a_writer_that_cannot_run_costs_one_line_not_the_output(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    settings = MonitorSettings(
        source="off", command=(str(tmp_path / "no-python"), "-m", "orchestrator.monitor")
    )
    proc = start(tmp_path, settings, [sys.executable, "-c", NOTICED], started)
    assert proc.stdout is not None
    note = proc.stdout.readline().decode()
    assert note.startswith(
        f"gpuctl: note: {tmp_path}/no-python -m orchestrator.backends.output_log did not run"
    )
    assert note.endswith("node1\n")
    assert proc.stdout.readline() == b"ready\n"
    os.killpg(proc.pid, signal.SIGTERM)  # cat, in the writer's place, outlives the launcher too
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 75
    assert output == b"gpuctl: preemption notice (SIGTERM): checkpoint saved\n"


def test_the_writer_runs_with_the_monitor_commands_python_whatever_its_path(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    folder = tmp_path / "py $(touch hacked) 'x\" `id`"
    folder.mkdir()
    (folder / "python").symlink_to(sys.executable)
    settings = MonitorSettings(source="off", command=(str(folder / "python"), "-m", "orchestrator.monitor"))
    proc = start(tmp_path, settings, ["bash", "-c", "echo trained"], started)
    output, _ = proc.communicate(timeout=30)
    assert (proc.returncode, timed_lines(output)) == (0, ["trained"])
    assert not (tmp_path / "hacked").exists() and not Path("hacked").exists()


def test_a_process_left_holding_the_output_does_not_hold_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: list[subprocess.Popen[bytes]]
) -> None:
    monkeypatch.setattr(batch_script, "OUTPUT_DRAIN_S", 1)
    launcher = ["bash", "-c", "sleep 60 & echo trained; exit 4"]  # the sleep keeps the pipe open
    proc = start(tmp_path, OFF, launcher, started)
    began = time.monotonic()
    assert proc.wait(timeout=30) == 4
    assert time.monotonic() - began < 10
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    assert timed_lines(proc.stdout.read() or b"") == ["trained"]
