"""benchmarks/ledger_scale.py on a small ledger: ``--reports-only`` times the cost reports on both
engines and runs no controller round."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "ledger_scale.py"


@pytest.mark.slow
def test_reports_only_times_every_format_and_no_controller_round() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--jobs", "4", "--segments", "40", "--repeats", "1", "--reports-only"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    labels = [line.split("|")[1].strip() for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [label.split(" (")[0] for label in labels if not label.startswith("CPU")] == [
        "measurement",
        "read ledger + build report",
        "cost report -o table",
        "cost report -o csv",
        "cost report -o json",
        "cost report -o html",
    ]
    assert labels.count("CPU of gpuctl's process") == 5
    assert "controller round" not in done.stdout
