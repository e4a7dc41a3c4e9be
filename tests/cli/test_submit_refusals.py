"""`gpuctl submit` refuses a job that cannot fit its caps or budgets, before anything is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.state.store import JobStore

JOB = """name: big
command: train.py
resources: {gpu_types: [H100], gpus_per_node: 8, nodes: 4}
market: {mode: on-demand}
"""


@pytest.mark.parametrize(
    ("extra", "config", "expected"),
    [
        ("goals: {budget_usd: 100, compute_hours: 10}\n", None, "above its budget_usd $100.00"),
        ("market: {mode: on-demand, max_hourly_usd: 20}\n", None, "above its max_hourly_usd $20.00/h"),
        (
            "",
            "budgets: {teams: {default: 50}}\n",
            "team 'default' has $50.00 left of its $50.00 monthly budget",
        ),
        ("resources: {gpu_types: [Z900]}\n", None, "unknown GPU type 'Z900'"),
    ],
)
def test_refused_with_the_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    extra: str, config: str | None, expected: str,
) -> None:  # fmt: skip
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("GPUCTL_HOME", str(home))
    if config:
        (home / "config.yaml").write_text(config)
    text = JOB
    for line in extra.splitlines():  # a later key of the same name replaces the earlier one
        key = line.split(":", 1)[0]
        text = "\n".join(x for x in text.splitlines() if not x.startswith(key + ":")) + "\n" + line + "\n"
    job = tmp_path / "job.yaml"
    job.write_text(text)
    assert main(["submit", str(job)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "To fix" in err, err
    assert JobStore(home).list_jobs() == []
