from __future__ import annotations

from pathlib import Path

import pytest

from tests.controller.conftest import Gpuctl


@pytest.fixture
def gpuctl(tmp_path: Path) -> Gpuctl:
    """The real `gpuctl` CLI in subprocesses, with its own GPUCTL_HOME."""
    return Gpuctl(tmp_path / "home")
