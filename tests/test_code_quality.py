"""Lint, types and layering are part of the test suite, so the README's one test command covers them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    proc = _run(
        sys.executable, "-m", "ruff", "check", "orchestrator", "operators", "tests", "benchmarks", "examples"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_mypy_strict_is_clean() -> None:
    proc = _run(sys.executable, "-m", "mypy", "orchestrator", "operators")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_import_layers_hold() -> None:
    # the script beside this Python first: the venv need not be activated (`.venv/bin/python -m pytest`)
    beside = Path(sys.executable).parent / "lint-imports"
    lint = str(beside) if beside.exists() else shutil.which("lint-imports")
    assert lint, "import-linter is a dev dependency: pip install -e '.[dev]'"
    proc = _run(lint)
    assert proc.returncode == 0, proc.stdout + proc.stderr
