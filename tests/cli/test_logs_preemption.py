"""A real preemption on the local backend reads as one in `gpuctl logs` (issue 32, item 4): each node
shows the runtime's notice line, no torchrun SignalException traceback, and every line its time."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.controller.conftest import Gpuctl

pytestmark = pytest.mark.slow
QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"
TIMED = re.compile(r"^\[attempt-\d+/n\d\] \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")


def test_a_preempted_attempt_shows_the_notice_not_a_traceback(gpuctl: Gpuctl, tmp_path: Path) -> None:
    text = (
        (QUICKSTART / "job.yaml")
        .read_text()
        .replace("command: train.py --steps 300", "command: train.py --steps 40")
    )
    job = tmp_path / "job.yaml"
    job.write_text(
        text.replace("workdir: .", f"workdir: {QUICKSTART}").replace("every_steps: 50", "every_steps: 10")
    )
    out = gpuctl.run("submit", str(job), "--preempt-at", "step:15")
    assert "SUCCEEDED" in out.stdout, out.stdout
    lines = gpuctl.run("logs", "quickstart", "--attempt", "1").stdout.splitlines()
    for node in ("n0", "n1"):
        mine = [line for line in lines if line.startswith(f"[attempt-1/{node}] ")]
        notices = [line for line in mine if "gpuctl: preemption notice (SIGTERM): checkpoint of step" in line]
        assert len(notices) == 1 and notices[0].endswith("exiting 75 to be resumed"), mine
        assert sum("torchrun agent" in line and "stopped by SIGTERM" in line for line in mine) == 1, mine
    assert not [line for line in lines if "SignalException" in line or "Traceback" in line], lines
    assert all(TIMED.match(line) for line in lines), [line for line in lines if not TIMED.match(line)]
    raw = gpuctl.run("logs", "quickstart", "--raw").stdout
    assert raw.count("SignalException: Process") == 2
