"""Lint, types and layering are part of the test suite, so the README's one test command covers them."""

from __future__ import annotations

import ast
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


YAML_READERS = frozenset(
    {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all", "full_load_all",
     "unsafe_load_all", "compose", "compose_all", "parse", "scan", "Loader", "SafeLoader", "CSafeLoader",
     "FullLoader", "CFullLoader", "UnsafeLoader", "CUnsafeLoader", "CLoader", "BaseLoader", "CBaseLoader"}
)  # fmt: skip
"""What reads YAML in PyYAML: only orchestrator/userfiles.py, the one loader with limits, may use it."""


def test_yaml_is_read_only_through_the_one_loader() -> None:
    found = []
    for path in sorted([*(REPO / "orchestrator").rglob("*.py"), *(REPO / "operators").rglob("*.py")]):
        if path == REPO / "orchestrator" / "userfiles.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            used = (
                [node.attr] if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "yaml"
                else [a.name for a in node.names] if isinstance(node, ast.ImportFrom) and node.module == "yaml"
                else []
            )  # fmt: skip
            line = getattr(node, "lineno", 0)
            found += [f"{path.relative_to(REPO)}:{line} yaml.{n}" for n in used if n in YAML_READERS]
    why = "read YAML with orchestrator.userfiles.load_yaml (its limits), not:\n"
    assert not found, why + "\n".join(found)
