"""docs/cli.md is what the parser prints now, the same on every machine."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from orchestrator.cli import docs
from orchestrator.cli.main import build_parser

CLI_MD = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_md_is_up_to_date() -> None:
    committed = CLI_MD.read_text(encoding="utf-8")
    written_by = re.search(r"\(Python (\d+\.\d+) argparse", committed)
    if written_by and written_by.group(1) != docs.python_version():
        pytest.skip(f"docs/cli.md was written by Python {written_by.group(1)}; argparse's layout differs")
    assert committed == docs.render(), f"docs/cli.md is out of date: run `{docs.REGENERATE}` to regenerate it"


def test_every_command_and_subcommand_has_a_section() -> None:
    text = docs.render()
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings[0] == "gpuctl"
    assert {
        "gpuctl submit",
        "gpuctl simulate",
        "gpuctl sbatch",
        "gpuctl cost report",
        "gpuctl spec schema",
    } <= set(headings)
    assert len(headings) == len(set(headings))
    top = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert {f"gpuctl {name}" for name in top.choices} <= set(headings)
    assert "usage: gpuctl cost report [-h]" in text


def test_the_reference_does_not_depend_on_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    reference = docs.render()
    for name, value in {
        "COLUMNS": "37",
        "GPUCTL_NAMESPACE": "sentinel-namespace",
        "GPUCTL_HOME": "/sentinel-gpuctl-home",
        "HOME": "/sentinel-home",
        "GPUCTL_SLURM_CONFIG": "/sentinel-slurm.yaml",
        "USER": "sentinel-user",
    }.items():
        monkeypatch.setenv(name, value)
    assert docs.render(build_parser()) == reference
    assert "sentinel" not in reference
    assert max(len(line) for line in reference.split("```text")[1].splitlines()) <= docs.COLUMNS


def test_check_fails_with_the_command_to_run_then_write_fixes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli.md"
    out.write_text("stale\n")
    assert docs.main(["--output", str(out), "--check"]) == 1
    assert f"run `{docs.REGENERATE}`" in capsys.readouterr().err
    assert docs.main(["--output", str(out)]) == 0
    assert docs.main(["--output", str(out), "--check"]) == 0
    assert out.read_text() == docs.render()
