"""The examples of docs/testing.md are tests: each python block runs as written, in a pytest of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "testing.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_the_doc_has_its_five_examples() -> None:
    found = blocks()
    assert len(found) == 5 and all("def test_" in b for b in found)


@pytest.mark.slow  # the last one runs the real kopf operator on the simulated cluster
def test_the_examples_pass(tmp_path: Path) -> None:
    for index, block in enumerate(blocks()):
        (tmp_path / f"test_doc_example_{index}.py").write_text(block)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPUCTL_PRICE_CATALOG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "5 passed" in proc.stdout, proc.stdout[-2000:]
