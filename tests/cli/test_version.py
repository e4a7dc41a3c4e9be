"""`gpuctl --version`: one version, written once (orchestrator.__version__), agreed on everywhere."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml

import orchestrator
from orchestrator.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_version_flag_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"gpuctl {orchestrator.__version__}"


def test_version_flag_from_the_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == f"gpuctl {orchestrator.__version__}"


def test_pyproject_takes_the_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"], "write the version only in orchestrator/__init__.py"
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "orchestrator.__version__"}


def test_installed_metadata_and_chart_agree() -> None:
    try:
        installed = metadata.version("gpuctl")
    except metadata.PackageNotFoundError:
        installed = orchestrator.__version__  # running from a checkout that was never installed
    assert installed == orchestrator.__version__, "stale install: run `pip install -e .` again"
    chart = yaml.safe_load((ROOT / "charts" / "gpuctl" / "Chart.yaml").read_text())
    assert chart["appVersion"] == orchestrator.__version__
